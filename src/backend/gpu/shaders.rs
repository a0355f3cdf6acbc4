//! The WGSL sources, embedded at compile time, and the small `#import` preprocessor that
//! composes a stage from its shared helpers (one module per name, each included once).

use crate::error::{Error, Result};

/// Every shader file by the name `#import` uses: stages by their name, helpers under `shared/`.
pub const SOURCES: &[(&str, &str)] = &[
    ("shared/material", include_str!("../../../shaders/shared/material.wgsl")),
    ("shared/eigensystem", include_str!("../../../shaders/shared/eigensystem.wgsl")),
    ("shared/elastic", include_str!("../../../shaders/shared/elastic.wgsl")),
    ("shared/dispatch", include_str!("../../../shaders/shared/dispatch.wgsl")),
    ("shared/reduce", include_str!("../../../shaders/shared/reduce.wgsl")),
    ("shared/spring", include_str!("../../../shaders/shared/spring.wgsl")),
    ("shared/collider", include_str!("../../../shaders/shared/collider.wgsl")),
    ("shared/slots", include_str!("../../../shaders/shared/slots.wgsl")),
    ("element", include_str!("../../../shaders/element.wgsl")),
    ("gather", include_str!("../../../shaders/gather.wgsl")),
    ("assemble", include_str!("../../../shaders/assemble.wgsl")),
    ("pcg", include_str!("../../../shaders/pcg.wgsl")),
    ("vector", include_str!("../../../shaders/vector.wgsl")),
];

/// The stages: composed modules with entry points.
pub const STAGES: &[&str] = &["element", "gather", "assemble", "pcg", "vector"];

fn source(name: &str) -> Result<&'static str> {
    SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .ok_or_else(|| Error::Unsupported(format!("no shader named {name:?}")))
}

/// The stage `name` with its imports expanded in place.
pub fn compose(name: &str) -> Result<String> {
    let mut included = Vec::new();
    let mut out = String::new();
    expand(name, &mut included, &mut out)?;
    Ok(out)
}

fn expand(name: &str, included: &mut Vec<String>, out: &mut String) -> Result<()> {
    if included.iter().any(|n| n == name) {
        return Ok(());
    }
    included.push(name.to_string());
    for line in source(name)?.lines() {
        match line.trim().strip_prefix("#import ") {
            Some(import) => expand(import.trim(), included, out)?,
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    Ok(())
}

/// How a binding is used, as the Rust side creates it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingKind {
    /// A uniform block of this many bytes.
    Uniform { size: u64 },
    /// A storage array.
    Storage { read_only: bool },
}

/// One binding of a stage: where it is and what it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// Bind group: 0 per-step parameters, 1 model, 2 state, 3 scratch.
    pub group: u32,
    /// Binding index in the group.
    pub binding: u32,
    /// The shader variable's name.
    pub name: &'static str,
    /// How it is used.
    pub kind: BindingKind,
}
