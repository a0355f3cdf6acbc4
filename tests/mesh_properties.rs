//! Property tests of the mesh writers and readers (proptest): any generated and deformed tet
//! mesh written to legacy VTK reads back the same, inverted tets reoriented; any of its
//! boundary surfaces through OBJ and PLY too; and no byte string makes a reader panic (it is a
//! mesh or an error).

use std::path::PathBuf;

use lively::{TetMesh, TriMesh};
use proptest::prelude::*;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lively-props-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A bar of up to 4x3x3 cells and a deformation of every coordinate by up to a tenth of a
/// cell, with values that need all 17 significant digits.
fn deformed_bar() -> impl Strategy<Value = (TetMesh, Vec<[f64; 3]>)> {
    ([1usize..5, 1..4, 1..4], [0.05f64..2.0, 0.05..2.0, 0.05..2.0], any::<u64>()).prop_map(
        |(cells, size, seed)| {
            let mesh = TetMesh::bar(cells, size);
            let mut state = seed | 1;
            let mut next = move || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
            };
            let h = size[0] / cells[0] as f64;
            let moved =
                mesh.positions().iter().map(|p| p.map(|c| c + 0.2 * h * next() + 1e-9 * next())).collect();
            (mesh, moved)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_deformed_tet_mesh_round_trips_through_vtk((mesh, moved) in deformed_bar()) {
        let path = scratch("frame.vtk");
        mesh.save(&path, Some(&moved)).unwrap();
        let back = TetMesh::load(&path).unwrap();
        prop_assert_eq!(back.positions(), &moved[..]);
        // The reader orients every tet positively: a tet the deformation inverted comes back
        // with its last two corners swapped, every other one as written.
        for (k, (read, written)) in back.tets().iter().zip(mesh.tets()).enumerate() {
            let p = written.map(|v| glam::DVec3::from(moved[v as usize]));
            let inverted = (p[1] - p[0]).cross(p[2] - p[0]).dot(p[3] - p[0]) < 0.0;
            let expected = if inverted { [written[0], written[1], written[3], written[2]] } else { *written };
            prop_assert_eq!(*read, expected, "tet {}", k);
        }
        prop_assert_eq!(back.tets().len(), mesh.tets().len());
    }

    #[test]
    fn its_surface_round_trips_through_obj_and_ply((mesh, moved) in deformed_bar()) {
        let surface = mesh.surface_mesh(Some(&moved)).unwrap();
        for name in ["surface.obj", "surface.ply"] {
            let path = scratch(name);
            surface.save(&path).unwrap();
            let back = TriMesh::load(&path).unwrap();
            prop_assert_eq!(back.positions(), surface.positions());
            prop_assert_eq!(back.triangles(), surface.triangles());
        }
    }

    /// Arbitrary bytes, and the bytes of a valid file with some replaced: every reader returns
    /// a mesh or an error, never a panic or an abort.
    #[test]
    fn no_bytes_make_a_reader_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        (mesh, moved) in deformed_bar(),
    ) {
        let valid = scratch("valid.vtk");
        mesh.save(&valid, Some(&moved)).unwrap();
        let mut damaged = std::fs::read(&valid).unwrap();
        for (at, byte) in edits {
            let len = damaged.len();
            damaged[at % len] = byte;
        }
        for extension in ["msh", "node", "ele", "vtk", "mesh", "obj", "ply"] {
            for (kind, content) in [("random", &bytes), ("damaged", &damaged)] {
                let path = scratch(&format!("{kind}.{extension}"));
                std::fs::write(&path, content).unwrap();
                let _ = TetMesh::load(&path);
                let _ = TriMesh::load(&path);
            }
        }
    }
}
