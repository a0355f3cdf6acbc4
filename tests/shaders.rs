//! Every composed shader parses and validates with naga (no GPU needed), its binding table —
//! which the Rust side reads from the shader rather than declaring a second time — follows the
//! bind-group convention (0 parameters, 1 model, 2 state, 3 scratch; no `vec3` in storage),
//! each stage's uniform block has the byte size of its Rust parameter struct, and each entry
//! point's bindings (those its pipeline layout holds) are the ones it uses. Each stage
//! is checked with either form of its workgroup sums: the tree, and subgroups of the sizes
//! devices have.

use lively::backend::gpu::params_size;
use lively::backend::gpu::shaders::{
    BindingKind, Reductions, STAGES, compose, entry_bindings, immediate_size, module, reflect,
};

const REDUCTIONS: [Reductions; 4] =
    [Reductions::Tree, Reductions::Subgroup(8), Reductions::Subgroup(32), Reductions::Subgroup(64)];

#[test]
fn every_stage_composes_and_validates() {
    assert!(!STAGES.is_empty());
    for stage in STAGES {
        for reductions in REDUCTIONS {
            let (_, parsed, _) = module(stage, reductions, false).unwrap_or_else(|e| panic!("{e}"));
            assert!(!parsed.entry_points.is_empty(), "{stage} has no entry point");
            let source = compose(stage, reductions, false).unwrap();
            // Imports are expanded: no directive reaches naga.
            assert!(!source.contains("#import"));
            // The subgroup sums replace the tree wherever the stage sums.
            let subgroups = source.contains("subgroupAdd");
            let sums = source.contains("fn workgroup_sum");
            assert_eq!(subgroups, sums && reductions != Reductions::Tree, "{stage} with {reductions:?}");
        }
    }
}

/// Where the device has immediates, every stage's parameters are immediate data: the same
/// struct, of the Rust side's size and within the room the context asks for, and no binding
/// left in group 0.
#[test]
fn every_stage_takes_its_parameters_as_immediates_too() {
    use lively::backend::gpu::PARAMS_BYTES;
    for stage in STAGES {
        let (source, parsed, _) =
            module(stage, Reductions::Subgroup(32), true).unwrap_or_else(|e| panic!("{e}"));
        assert!(source.contains("var<immediate> params: Params;"), "{stage}");
        let table = reflect(&parsed).unwrap();
        assert!(table.iter().all(|b| b.group > 0), "{stage} still binds group 0");
        let rust = params_size(stage).unwrap_or_else(|| panic!("no parameter struct for {stage}"));
        assert_eq!(immediate_size(&parsed).unwrap(), rust as u32, "{stage}");
        // Composed without immediates, the stage declares none.
        let (_, uniform, _) = module(stage, Reductions::Subgroup(32), false).unwrap();
        assert_eq!(immediate_size(&uniform).unwrap(), 0, "{stage}");
        assert!(rust as u32 <= PARAMS_BYTES, "{stage}: {rust} bytes of parameters");
    }
}

#[test]
fn subgroup_sums_know_their_subgroup_size() {
    let source = compose("pcg", Reductions::Subgroup(32), false).unwrap();
    assert_eq!(source.matches("const SUBGROUP: u32 = 32u;").count(), 1);
    assert!(!compose("pcg", Reductions::Tree, false).unwrap().contains("SUBGROUP"));
    // The check of where subgroups sit, run once per context, validates too.
    let (_, parsed, _) = module("subgroups", Reductions::Tree, false).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(parsed.entry_points.len(), 1);
}

#[test]
fn binding_tables_follow_the_convention_and_parameters_match_rust() {
    for stage in STAGES {
        let (_, parsed, _) = module(stage, Reductions::Tree, false).unwrap();
        let table = reflect(&parsed).unwrap();
        assert!(!table.is_empty(), "{stage} binds nothing");
        for binding in &table {
            let name = &binding.name;
            assert!(binding.group <= 3, "{stage}: {name} in group {}", binding.group);
            match binding.kind {
                BindingKind::Uniform { size } => {
                    assert_eq!(
                        (binding.group, binding.binding),
                        (0, 0),
                        "{stage}: uniform {name} outside (0, 0)"
                    );
                    let rust =
                        params_size(stage).unwrap_or_else(|| panic!("no parameter struct for {stage}"));
                    assert_eq!(size, rust, "{stage}: parameters are {size} bytes in WGSL, {rust} in Rust");
                }
                BindingKind::Storage { .. } => {
                    assert!(binding.group > 0, "{stage}: storage {name} in the parameter group");
                }
            }
        }
        // A name is bound once per stage: it is the buffer's identity.
        let mut names: Vec<&str> = table.iter().map(|b| b.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), table.len(), "{stage} binds a name twice");
        // No vec3 in storage arrays (their 16-byte stride differs from the Rust layout).
        let source = compose(stage, Reductions::Tree, false).unwrap();
        for line in source.lines().filter(|l| l.contains("var<storage")) {
            assert!(!line.contains("vec3"), "{stage}: {line}");
        }
    }
}

/// Every stage's entry points bind a subset of its table, each what it uses: the CG
/// stage declares 38 buffers, its product binds 22 (the couplings' among them) and its
/// `finish` 10; every entry point binds its parameters. The loop's kernels bind none of the
/// start's buffers (wgpu tracks every bound buffer at every dispatch).
#[test]
fn entry_points_bind_what_they_use() {
    for &stage in STAGES {
        let (_, parsed, info) = module(stage, Reductions::Tree, false).unwrap();
        let table: Vec<(u32, u32)> = reflect(&parsed).unwrap().iter().map(|b| (b.group, b.binding)).collect();
        let entries = entry_bindings(&parsed, &info);
        assert!(!entries.is_empty(), "{stage}: no entry points");
        for (entry, used) in &entries {
            assert!(used.iter().all(|b| table.contains(b)), "{stage}/{entry}: {used:?} outside {table:?}");
            assert!(used.contains(&(0, 0)), "{stage}/{entry} does not read its parameters");
        }
    }
    let (_, pcg, info) = module("pcg", Reductions::Tree, false).unwrap();
    let declared = reflect(&pcg).unwrap().len();
    let entries = entry_bindings(&pcg, &info);
    let used = |entry: &str| entries.iter().find(|(name, _)| name == entry).unwrap().1.clone();
    let (product, finish) = (used("product"), used("finish"));
    assert!(product.len() < declared, "the product binds {} of {declared}", product.len());
    assert!(finish.len() <= declared / 3, "finish binds {} of {declared}", finish.len());
    let bound = |entry: &str| -> Vec<String> {
        let used = used(entry);
        pcg.global_variables
            .iter()
            .filter(|(_, v)| v.binding.as_ref().is_some_and(|b| used.contains(&(b.group, b.binding))))
            .filter_map(|(_, v)| v.name.clone())
            .collect()
    };
    let names = bound("product");
    assert!(
        names.iter().any(|n| n == "blocks") && names.iter().any(|n| n == "ap"),
        "the product binds {names:?}"
    );
    // The loop's kernels bind nothing that only a solve's start or the pipelined loop reads.
    for (entry, needless) in [
        ("product", &["rhs", "gather_partials", "warm_partials", "earlier_product", "pipelined_vectors"][..]),
        ("update", &["gather_partials", "warm_partials", "pipelined_vectors"][..]),
    ] {
        let bound = bound(entry);
        assert!(needless.iter().all(|name| !bound.iter().any(|b| b == name)), "{entry} binds {bound:?}");
    }
}
