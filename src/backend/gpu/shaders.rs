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
    ("shared/reduce_subgroup", include_str!("../../../shaders/shared/reduce_subgroup.wgsl")),
    ("shared/spring", include_str!("../../../shaders/shared/spring.wgsl")),
    ("shared/collider", include_str!("../../../shaders/shared/collider.wgsl")),
    ("shared/slots", include_str!("../../../shaders/shared/slots.wgsl")),
    ("shared/tets", include_str!("../../../shaders/shared/tets.wgsl")),
    ("shared/rotation", include_str!("../../../shaders/shared/rotation.wgsl")),
    ("shared/search", include_str!("../../../shaders/shared/search.wgsl")),
    ("shared/frame", include_str!("../../../shaders/shared/frame.wgsl")),
    ("shared/matrix", include_str!("../../../shaders/shared/matrix.wgsl")),
    ("shared/couplings", include_str!("../../../shaders/shared/couplings.wgsl")),
    ("shared/coupling_product", include_str!("../../../shaders/shared/coupling_product.wgsl")),
    ("element", include_str!("../../../shaders/element.wgsl")),
    ("local", include_str!("../../../shaders/local.wgsl")),
    ("mixed", include_str!("../../../shaders/mixed.wgsl")),
    ("gather", include_str!("../../../shaders/gather.wgsl")),
    ("contact", include_str!("../../../shaders/contact.wgsl")),
    ("self_contact", include_str!("../../../shaders/self_contact.wgsl")),
    ("assemble", include_str!("../../../shaders/assemble.wgsl")),
    ("pcg", include_str!("../../../shaders/pcg.wgsl")),
    ("vector", include_str!("../../../shaders/vector.wgsl")),
    ("line_search", include_str!("../../../shaders/line_search.wgsl")),
    ("render", include_str!("../../../shaders/render.wgsl")),
    ("subgroups", include_str!("../../../shaders/subgroups.wgsl")),
];

/// The stages: composed modules with entry points.
pub const STAGES: &[&str] = &[
    "element",
    "local",
    "mixed",
    "gather",
    "contact",
    "self_contact",
    "assemble",
    "pcg",
    "vector",
    "line_search",
];

/// How the stages' workgroup sums are made (`shared/reduce` or its twin).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reductions {
    /// A tree through workgroup memory, a barrier per halving: any device.
    Tree,
    /// Subgroup operations, two barriers a sum: devices whose subgroups have this fixed size
    /// and follow the local invocation index (`GpuContext` checks).
    Subgroup(u32),
}

/// The composed stage `name`, parsed and validated by naga, with what validation found (the
/// globals each entry point uses).
pub fn module(
    name: &str,
    reductions: Reductions,
    immediates: bool,
) -> Result<(String, naga::Module, naga::valid::ModuleInfo)> {
    let source = compose(name, reductions, immediates)?;
    let module = naga::front::wgsl::parse_str(&source)
        .map_err(|e| Error::Unsupported(format!("shader {name}: {}", e.emit_to_string(&source))))?;
    let info =
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
            .validate(&module)
            .map_err(|e| Error::Unsupported(format!("shader {name}: {}", e.emit_to_string(&source))))?;
    Ok((source, module, info))
}

/// The binding table of stage `name`, read from its composed source: every global with a
/// binding, its name, and how it is used (uniform blocks with their size).
pub fn reflect(module: &naga::Module) -> Result<Vec<Binding>> {
    let mut layouter = naga::proc::Layouter::default();
    layouter.update(module.to_ctx()).map_err(|e| Error::Unsupported(format!("shader layout: {e}")))?;
    let mut table = Vec::new();
    for (_, var) in module.global_variables.iter() {
        let Some(binding) = &var.binding else { continue };
        let kind = match var.space {
            naga::AddressSpace::Uniform => BindingKind::Uniform { size: layouter[var.ty].size as u64 },
            naga::AddressSpace::Storage { access } => {
                BindingKind::Storage { read_only: !access.contains(naga::StorageAccess::STORE) }
            }
            other => return Err(Error::Unsupported(format!("binding in address space {other:?}"))),
        };
        let name = var.name.clone().unwrap_or_default();
        table.push(Binding { group: binding.group, binding: binding.binding, name, kind });
    }
    table.sort_by_key(|b| (b.group, b.binding));
    Ok(table)
}

/// The size of the immediate data `module` declares (its `params`, where composed with
/// immediates), rounded up to whole words; 0 where it declares none.
pub fn immediate_size(module: &naga::Module) -> Result<u32> {
    let mut layouter = naga::proc::Layouter::default();
    layouter.update(module.to_ctx()).map_err(|e| Error::Unsupported(format!("shader layout: {e}")))?;
    Ok(module
        .global_variables
        .iter()
        .filter(|(_, var)| var.space == naga::AddressSpace::Immediate)
        .map(|(_, var)| layouter[var.ty].size.next_multiple_of(4))
        .max()
        .unwrap_or(0))
}

/// An entry point's name and the bindings (group, binding) it uses.
pub type EntryBindings = (String, Vec<(u32, u32)>);

/// For each entry point of a validated stage, the bindings it uses, itself or through the
/// functions it calls, `arrayLength` included.
pub fn entry_bindings(module: &naga::Module, info: &naga::valid::ModuleInfo) -> Vec<EntryBindings> {
    module
        .entry_points
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let uses = info.get_entry_point(i);
            let mut used: Vec<(u32, u32)> = module
                .global_variables
                .iter()
                .filter(|(handle, _)| !uses[*handle].is_empty())
                .filter_map(|(_, var)| var.binding.as_ref().map(|b| (b.group, b.binding)))
                .collect();
            used.sort_unstable();
            (entry.name.clone(), used)
        })
        .collect()
}

fn source(name: &str) -> Result<&'static str> {
    SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .ok_or_else(|| Error::Unsupported(format!("no shader named {name:?}")))
}

/// The stage `name` with its imports expanded in place, its workgroup sums made as
/// `reductions` says, and its parameters (`params`) in immediate data where `immediates`,
/// else in a uniform block (group 0). (Naga takes subgroup operations without WGSL's
/// `enable subgroups;`, which it does not parse yet; the device's feature is what allows them.)
pub fn compose(name: &str, reductions: Reductions, immediates: bool) -> Result<String> {
    let mut included = Vec::new();
    let mut out = String::new();
    expand(name, reductions, immediates, &mut included, &mut out)?;
    Ok(out)
}

/// How every stage declares its parameters in WGSL: a uniform block, group 0, binding 0.
const UNIFORM_PARAMS: &str = "@group(0) @binding(0) var<uniform> params: Params;";

fn expand(
    name: &str,
    reductions: Reductions,
    immediates: bool,
    included: &mut Vec<String>,
    out: &mut String,
) -> Result<()> {
    if included.iter().any(|n| n == name) {
        return Ok(());
    }
    included.push(name.to_string());
    let name = match (name, reductions) {
        ("shared/reduce", Reductions::Subgroup(size)) => {
            out.push_str(&format!("const SUBGROUP: u32 = {size}u;\n"));
            "shared/reduce_subgroup"
        }
        _ => name,
    };
    for line in source(name)?.lines() {
        match line.trim().strip_prefix("#import ") {
            Some(import) => expand(import.trim(), reductions, immediates, included, out)?,
            None if immediates && line.trim() == UNIFORM_PARAMS => {
                out.push_str("var<immediate> params: Params;\n")
            }
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// Bind group: 0 per-step parameters, 1 model, 2 state, 3 scratch.
    pub group: u32,
    /// Binding index in the group.
    pub binding: u32,
    /// The shader variable's name: the name of the buffer bound there.
    pub name: String,
    /// How it is used.
    pub kind: BindingKind,
}
