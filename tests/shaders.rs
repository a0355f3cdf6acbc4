//! Every composed shader parses and validates with naga (no GPU needed), and the bindings the
//! Rust side declares agree with what the shaders declare: group, binding, name, address
//! space, access, and the byte size of uniform blocks.

use lively::backend::gpu::shaders::{BindingKind, STAGES, compose};
use lively::backend::gpu::stage_bindings;

fn validated(stage: &str) -> naga::Module {
    let source = compose(stage).unwrap_or_else(|e| panic!("{stage}: {e}"));
    let module = naga::front::wgsl::parse_str(&source)
        .unwrap_or_else(|e| panic!("{stage}: {}", e.emit_to_string(&source)));
    naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::default())
        .validate(&module)
        .unwrap_or_else(|e| panic!("{stage}: {}", e.emit_to_string(&source)));
    module
}

#[test]
fn every_stage_composes_and_validates() {
    assert!(!STAGES.is_empty());
    for stage in STAGES {
        let module = validated(stage);
        assert!(!module.entry_points.is_empty(), "{stage} has no entry point");
        // Imports are expanded: no directive reaches naga.
        assert!(!compose(stage).unwrap().contains("#import"));
    }
}

#[test]
fn rust_binding_tables_match_the_shaders() {
    for stage in STAGES {
        let module = validated(stage);
        let table = stage_bindings(stage).unwrap_or_else(|| panic!("no binding table for {stage}"));
        let mut layouter = naga::proc::Layouter::default();
        layouter.update(module.to_ctx()).unwrap();
        let mut seen = 0;
        for (_, var) in module.global_variables.iter() {
            let Some(binding) = &var.binding else { continue };
            let name = var.name.as_deref().unwrap_or("?");
            let declared = table
                .iter()
                .find(|b| b.group == binding.group && b.binding == binding.binding)
                .unwrap_or_else(|| {
                    panic!(
                        "{stage}: {name} at ({}, {}) is not in the Rust table",
                        binding.group, binding.binding
                    )
                });
            assert_eq!(
                declared.name, name,
                "{stage}: binding ({}, {}) names differ",
                binding.group, binding.binding
            );
            match (declared.kind, var.space) {
                (BindingKind::Uniform { size }, naga::AddressSpace::Uniform) => {
                    let shader_size = layouter[var.ty].size as u64;
                    assert_eq!(
                        size, shader_size,
                        "{stage}: uniform {name} is {shader_size} bytes in WGSL, {size} in Rust"
                    );
                }
                (BindingKind::Storage { read_only }, naga::AddressSpace::Storage { access }) => {
                    let writes = access.contains(naga::StorageAccess::STORE);
                    assert_eq!(read_only, !writes, "{stage}: {name} access differs");
                }
                (kind, space) => panic!("{stage}: {name} is {space:?} in WGSL but {kind:?} in Rust"),
            }
            seen += 1;
        }
        assert_eq!(seen, table.len(), "{stage}: the Rust table declares bindings the shader does not use");
    }
}
