//! The fuzzers' inputs as regression tests (`fuzz/`, run with cargo fuzz): every seed parses
//! to a mesh, and every input a fuzzer ever found failing (`fuzz/regressions/<target>/`) now
//! gives a valid mesh or an error, without a panic.

use std::path::Path;

use lively::{TetMesh, TriMesh};

/// Parses `bytes` as the fuzz target `target` does, with its checks on what parses (every
/// tet with a positive smallest dihedral angle); `Ok(true)` for a mesh, `Ok(false)` for an
/// error, `Err` for bytes the target skips (not UTF-8).
fn parse(target: &str, bytes: &[u8]) -> Result<bool, std::str::Utf8Error> {
    let tets = |mesh: lively::Result<(TetMesh, lively::LoadReport)>| match mesh {
        Ok((mesh, _)) => {
            let (smallest, _) = mesh.dihedral_angle_range();
            assert!(smallest > 0.0, "a loaded mesh has a degenerate tet");
            true
        }
        Err(_) => false,
    };
    Ok(match target {
        "tetgen" => {
            let split = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            let ele = bytes.get(split + 1..).unwrap_or(&[]);
            tets(TetMesh::parse_tetgen(std::str::from_utf8(&bytes[..split])?, std::str::from_utf8(ele)?))
        }
        "obj" | "ply" => TriMesh::parse(&format!("fuzz.{target}"), std::str::from_utf8(bytes)?).is_ok(),
        "gmsh" => tets(TetMesh::parse("fuzz.msh", std::str::from_utf8(bytes)?)),
        "medit" => tets(TetMesh::parse("fuzz.mesh", std::str::from_utf8(bytes)?)),
        "vtk" => tets(TetMesh::parse("fuzz.vtk", std::str::from_utf8(bytes)?)),
        other => panic!("unknown fuzz target {other}"),
    })
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
        assert_eq!(parse(&target, &bytes), Ok(true), "{}", path.display());
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
