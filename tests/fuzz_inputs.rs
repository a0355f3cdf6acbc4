//! The fuzzers' inputs as regression tests (`fuzz/`, run with cargo fuzz): every seed parses
//! to a mesh, and every input a fuzzer ever found failing (`fuzz/regressions/<target>/`) now
//! gives a valid mesh or an error, without a panic.

use std::path::Path;

/// The fuzz targets' own checks (the fuzz crate is a workspace of its own, so its source is
/// included here rather than depended on).
#[path = "../fuzz/src/lib.rs"]
mod checks;

/// Runs fuzz target `target`'s checks on `bytes`: true when they parse (and passed).
fn parse(target: &str, bytes: &[u8]) -> bool {
    match target {
        "tetgen" => checks::tetgen(bytes),
        "gmsh" => checks::tets("fuzz.msh", bytes),
        "medit" => checks::tets("fuzz.mesh", bytes),
        "vtk" => checks::tets("fuzz.vtk", bytes),
        "obj" | "ply" => checks::surface(&format!("fuzz.{target}"), bytes),
        other => panic!("unknown fuzz target {other}"),
    }
}

fn inputs(folder: &str) -> Vec<(String, std::path::PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz").join(folder);
    let mut out = Vec::new();
    for target in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let name = target.file_name().to_string_lossy().into_owned();
        for file in std::fs::read_dir(target.path()).unwrap().flatten() {
            out.push((name.clone(), file.path()));
        }
    }
    out.sort();
    out
}

#[test]
fn every_seed_parses_to_a_mesh() {
    let seeds = inputs("seeds");
    assert_eq!(
        seeds.iter().map(|(t, _)| t.as_str()).collect::<std::collections::BTreeSet<_>>().len(),
        6,
        "a seed for each of the six readers"
    );
    for (target, path) in seeds {
        let bytes = std::fs::read(&path).unwrap();
        assert!(parse(&target, &bytes), "{} does not parse", path.display());
    }
}

#[test]
fn inputs_that_once_crashed_a_reader_are_handled() {
    for (target, path) in inputs("regressions") {
        let bytes = std::fs::read(&path).unwrap();
        // These inputs failed a check or panicked once; now they parse or are refused, and
        // what parses passes the checks.
        let parsed = parse(&target, &bytes);
        println!("{}: {parsed:?}", path.display());
    }
}
