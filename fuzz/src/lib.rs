//! What every fuzz target checks: a reader given any bytes returns a mesh or an error, never
//! panics or aborts, and a mesh it returns is valid. Each check returns whether the bytes
//! parsed. `tests/fuzz_inputs.rs` runs the same checks on the seeds and the regressions.

use lively::{TetMesh, TriMesh};

/// Bytes that are not UTF-8 never reach the parsers (`load` refuses them as an I/O error).
fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// A single-file tet-mesh reader, chosen by `name`'s extension.
pub fn tets(name: &str, data: &[u8]) -> bool {
    let Some(Ok((mesh, _))) = text(data).map(|text| TetMesh::parse(name, text)) else { return false };
    check_tets(&mesh);
    true
}

/// TetGen: the bytes before the first NUL are the `.node` file, the rest the `.ele` file.
pub fn tetgen(data: &[u8]) -> bool {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let (node, ele) = (&data[..split], data.get(split + 1..).unwrap_or(&[]));
    let (Some(node), Some(ele)) = (text(node), text(ele)) else { return false };
    let Ok((mesh, _)) = TetMesh::parse_tetgen(node, ele) else { return false };
    check_tets(&mesh);
    true
}

/// A surface reader, chosen by `name`'s extension.
pub fn surface(name: &str, data: &[u8]) -> bool {
    let Some(Ok(mesh)) = text(data).map(|text| TriMesh::parse(name, text)) else { return false };
    let n = mesh.positions().len();
    assert!(mesh.triangles().iter().flatten().all(|&v| (v as usize) < n));
    assert!(mesh.positions().iter().flatten().all(|c| c.is_finite()));
    true
}

fn check_tets(mesh: &TetMesh) {
    let n = mesh.vertex_count();
    assert!(mesh.tets().iter().flatten().all(|&v| (v as usize) < n));
    assert!(mesh.positions().iter().flatten().all(|c| c.is_finite()));
    let (smallest, _) = mesh.dihedral_angle_range();
    assert!(smallest > 0.0, "a loaded mesh has a degenerate tet");
}
