//! Mesh readers and writers, surfaces and the isosurface-stuffing tetrahedralization.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use lively::{Error, Integrator, Material, Simulation, TetMesh, TriMesh};

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lively-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The bar written in every format (two of them with tets flipped, as some files store them).
fn write_all(dir: &Path, mesh: &TetMesh) -> Vec<PathBuf> {
    let (p, t) = (mesh.positions(), mesh.tets());
    let flipped =
        |k: usize, tet: &[u32; 4]| if k.is_multiple_of(2) { *tet } else { [tet[0], tet[1], tet[3], tet[2]] };
    let mut gmsh4 = String::from("$MeshFormat\n4.1 0 8\n$EndMeshFormat\n$Nodes\n");
    writeln!(gmsh4, "1 {n} 1 {n}\n3 1 0 {n}", n = p.len()).unwrap();
    for i in 0..p.len() {
        writeln!(gmsh4, "{}", i + 1).unwrap();
    }
    for q in p {
        writeln!(gmsh4, "{} {} {}", q[0], q[1], q[2]).unwrap();
    }
    writeln!(gmsh4, "$EndNodes\n$Elements\n1 {n} 1 {n}\n3 1 4 {n}", n = t.len()).unwrap();
    for (k, tet) in t.iter().enumerate() {
        let tet = flipped(k, tet);
        writeln!(gmsh4, "{} {} {} {} {}", k + 1, tet[0] + 1, tet[1] + 1, tet[2] + 1, tet[3] + 1).unwrap();
    }
    gmsh4.push_str("$EndElements\n");
    let mut gmsh2 = format!("$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Nodes\n{}\n", p.len());
    for (i, q) in p.iter().enumerate() {
        writeln!(gmsh2, "{} {} {} {}", i + 10, q[0], q[1], q[2]).unwrap();
    }
    writeln!(gmsh2, "$EndNodes\n$Elements\n{}", t.len() + 1).unwrap();
    writeln!(gmsh2, "1 15 2 0 0 10").unwrap(); // a point element, ignored
    for (k, tet) in t.iter().enumerate() {
        writeln!(gmsh2, "{} 4 2 0 0 {} {} {} {}", k + 2, tet[0] + 10, tet[1] + 10, tet[2] + 10, tet[3] + 10)
            .unwrap();
    }
    gmsh2.push_str("$EndElements\n");
    let mut node = format!("{} 3 0 0\n", p.len());
    for (i, q) in p.iter().enumerate() {
        writeln!(node, "{} {} {} {}", i + 1, q[0], q[1], q[2]).unwrap();
    }
    let mut ele = format!("{} 4 0\n", t.len());
    for (k, tet) in t.iter().enumerate() {
        let tet = flipped(k, tet);
        writeln!(ele, "{} {} {} {} {}", k + 1, tet[0] + 1, tet[1] + 1, tet[2] + 1, tet[3] + 1).unwrap();
    }
    let mut vtk = format!(
        "# vtk DataFile Version 3.0\nbar\nASCII\nDATASET UNSTRUCTURED_GRID\nPOINTS {} double\n",
        p.len()
    );
    for q in p {
        writeln!(vtk, "{} {} {}", q[0], q[1], q[2]).unwrap();
    }
    writeln!(vtk, "CELLS {} {}", t.len(), 5 * t.len()).unwrap();
    for tet in t {
        writeln!(vtk, "4 {} {} {} {}", tet[0], tet[1], tet[2], tet[3]).unwrap();
    }
    writeln!(vtk, "CELL_TYPES {}", t.len()).unwrap();
    for _ in t {
        vtk.push_str("10\n");
    }
    let mut medit = format!("MeshVersionFormatted 1\nDimension 3\nVertices\n{}\n", p.len());
    for q in p {
        writeln!(medit, "{} {} {} 0", q[0], q[1], q[2]).unwrap();
    }
    writeln!(medit, "Tetrahedra\n{}", t.len()).unwrap();
    for tet in t {
        writeln!(medit, "{} {} {} {} 0", tet[0] + 1, tet[1] + 1, tet[2] + 1, tet[3] + 1).unwrap();
    }
    medit.push_str("End\n");
    let files = [
        ("bar4.msh", gmsh4),
        ("bar2.msh", gmsh2),
        ("bar.node", node),
        ("bar.ele", ele),
        ("bar.vtk", vtk),
        ("bar.mesh", medit),
    ];
    for (name, text) in &files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    ["bar4.msh", "bar2.msh", "bar.node", "bar.vtk", "bar.mesh"].iter().map(|n| dir.join(n)).collect()
}

#[test]
fn every_format_reads_back_the_same_positively_oriented_mesh() {
    let dir = scratch_dir("formats");
    let mesh = TetMesh::bar([3, 2, 2], [0.3, 0.2, 0.2]);
    for path in write_all(&dir, &mesh) {
        let (loaded, report) =
            TetMesh::load_with_report(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // The Gmsh 4.1 and TetGen files were written with every second tet flipped.
        let name = path.file_name().unwrap().to_str().unwrap();
        let flipped = if ["bar4.msh", "bar.node"].contains(&name) { 30 } else { 0 };
        assert_eq!(report, lively::LoadReport { flipped, unused_vertices: 0 }, "{}", path.display());
        assert_eq!(loaded.positions().len(), mesh.positions().len(), "{}", path.display());
        assert_eq!(loaded.tets().len(), mesh.tets().len(), "{}", path.display());
        // TetMesh::new accepted it, so every tet is positive; the total volume is the box's.
        assert!((loaded.volume() - 0.3 * 0.2 * 0.2).abs() < 1e-12, "{}", path.display());
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_files_name_the_file_and_line() {
    let dir = scratch_dir("bad");
    let truncated = dir.join("short.msh");
    std::fs::write(&truncated, "$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Nodes\n3\n1 0 0 0\n2 1 x 0\n")
        .unwrap();
    let message = TetMesh::load(&truncated).unwrap_err().to_string();
    assert!(message.contains("short.msh line 7") && message.contains("coordinate"), "{message}");
    let dangling = dir.join("dangling.mesh");
    std::fs::write(&dangling, "Vertices\n1\n0 0 0 0\nTetrahedra\n1\n1 2 3 4 0\n").unwrap();
    assert!(TetMesh::load(&dangling).unwrap_err().to_string().contains("vertex 2"));
    assert!(
        TetMesh::load(dir.join("mesh.stl")).unwrap_err().to_string().contains("unknown tet-mesh extension")
    );
    assert!(matches!(TetMesh::load(dir.join("missing.msh")), Err(Error::Io { .. })));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn hostile_counts_and_indices_are_errors_not_aborts() {
    let dir = scratch_dir("hostile");
    // Headers announcing far more items than any file holds: an error when the items run
    // out (the readers used to reserve the announced count and abort on the allocation).
    let huge = "1000000000000000000";
    let cases = [
        ("huge.node", format!("{huge} 3 0 0\n1 0 0 0\n")),
        ("huge.mesh", format!("Vertices\n{huge}\n0 0 0 0\n")),
        (
            "huge.vtk",
            format!(
                "# vtk DataFile Version 2.0\nx\nASCII\nDATASET UNSTRUCTURED_GRID\nPOINTS {huge} double\n0 0 0\n"
            ),
        ),
    ];
    for (name, text) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        if name.ends_with(".node") {
            std::fs::write(path.with_extension("ele"), "1 4 0\n1 1 1 1 1\n").unwrap();
        }
        let error = TetMesh::load(&path).unwrap_err().to_string();
        assert!(error.contains(name), "{name}: {error}");
    }
    let ply = |vertex_count: &str, face: &str| {
        format!(
            "ply\nformat ascii 1.0\nelement vertex {vertex_count}\nproperty float x\nproperty float y\n\
             property float z\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n\
             0 0 0\n1 0 0\n0 1 0\n{face}\n"
        )
    };
    for (name, text, expected) in [
        ("count.ply", ply("three", "3 0 1 2"), "line 3: expected an element count"),
        ("negative.ply", ply("3", "3 0 -1 2"), "line 13: expected a vertex index"),
        ("fraction.ply", ply("3", "3 0 1.5 2"), "line 13: expected a vertex index"),
        ("huge.ply", ply(huge, "3 0 1 2"), "unexpected end of file"),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let error = TriMesh::load(&path).unwrap_err().to_string();
        assert!(error.contains(name) && error.contains(expected), "{name}: {error}");
    }
    // A target edge so small that the cell counts would overflow.
    let error = TetMesh::from_surface(&cube_surface(), 1e-300).unwrap_err().to_string();
    assert!(error.contains("target_edge"), "{error}");
    std::fs::remove_dir_all(dir).ok();
}

fn cube_surface() -> TriMesh {
    let p = (0..8).map(|b| [(b & 1) as f64, ((b >> 1) & 1) as f64, ((b >> 2) & 1) as f64]).collect();
    let quads = [[0, 2, 3, 1], [4, 5, 7, 6], [0, 1, 5, 4], [2, 6, 7, 3], [0, 4, 6, 2], [1, 3, 7, 5]];
    let triangles = quads.iter().flat_map(|q| [[q[0], q[1], q[2]], [q[0], q[2], q[3]]]).collect();
    TriMesh::new(p, triangles).unwrap()
}

#[test]
fn surfaces_load_from_obj_and_ply() {
    let dir = scratch_dir("surfaces");
    let obj = dir.join("cube.obj");
    let mut text = String::from("# unit cube with quads and a negative index\n");
    for b in 0..8 {
        writeln!(text, "v {} {} {}", b & 1, (b >> 1) & 1, (b >> 2) & 1).unwrap();
    }
    text.push_str("f 1/1 3/2 4/3 2/4\nf 5 6 8 7\nf 1 2 6 5\nf 3 7 8 4\nf 1 5 7 3\nf -7 -5 -1 -3\n");
    std::fs::write(&obj, text).unwrap();
    let ply = dir.join("tri.ply");
    std::fs::write(&ply, "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n0 0 0\n1 0 0\n0 1 0\n3 0 1 2\n").unwrap();
    let cube = TriMesh::load(&obj).unwrap();
    assert_eq!((cube.positions().len(), cube.triangles().len()), (8, 12));
    let triangle = TriMesh::load(&ply).unwrap();
    assert_eq!(triangle.triangles(), &[[0, 1, 2]]);
    // An open surface cannot be filled.
    let message = TetMesh::from_surface(&triangle, 0.1).unwrap_err().to_string();
    assert!(message.contains("not closed") && message.contains("edge"), "{message}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn from_surface_fills_a_closed_surface_with_a_valid_mesh() {
    let mesh = TetMesh::from_surface(&cube_surface(), 0.1).unwrap();
    // Boundary vertices lie on the cube's faces, so the volume is the cube's but for the
    // chords cut across its edges and corners.
    let volume = mesh.volume();
    assert!((volume - 1.0).abs() < 1e-3, "volume {volume}");
    let (smallest, largest) = mesh.dihedral_angle_range();
    assert!(smallest > 9.0 && largest < 171.0, "dihedral angles {smallest}..{largest}");
    for p in mesh.surface().iter().flatten().map(|&v| mesh.positions()[v as usize]) {
        let off = p.iter().map(|c| c.abs().min((c - 1.0).abs())).fold(f64::INFINITY, f64::min);
        assert!(off < 1e-12, "boundary vertex {p:?} is not on the cube");
    }
    // And it simulates.
    let mut sim = Simulation::builder()
        .tet_body(mesh, Material::stable_neo_hookean(1e5, 0.3), 1000.0)
        .integrator(Integrator::BackwardEuler)
        .gravity([0.0, -9.81, 0.0])
        .pin(|p| p[1] < 1e-9)
        .build()
        .unwrap();
    assert!(sim.step().unwrap().converged);
    assert!(TetMesh::from_surface(&cube_surface(), -1.0).unwrap_err().to_string().contains("target_edge"));
}

/// The meshes in ../shared/meshes, when they are there.
fn shared(name: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/meshes").join(name);
    if path.exists() {
        Some(path)
    } else {
        eprintln!("skipping: {} is absent (the shared meshes are not part of the crate)", path.display());
        None
    }
}

#[test]
fn shared_meshes_load_with_their_published_counts() {
    for (name, vertices, tets) in [
        ("ipc-bar-651.msh", 292, 651),
        ("ipc-torus-491.msh", 200, 491),
        ("ipc-sphere-6k.msh", 1760, 6851),
        ("ipc-mat20x20.msh", 800, 2166),
        ("ipc-bunny-19k.msh", 4670, 19379),
        ("ipc-armadillo-55k.msh", 13230, 54985),
        ("pbd-armadillo-4k.node", 1180, 3717),
    ] {
        let Some(path) = shared(name) else { continue };
        let (mesh, report) = TetMesh::load_with_report(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((mesh.positions().len(), mesh.tets().len()), (vertices, tets), "{name}");
        // Published positively oriented: nothing to flip, nothing unused.
        assert_eq!(report, lively::LoadReport::default(), "{name}");
    }
}

#[test]
fn spot_is_stuffed_with_positive_tets_its_volume_and_good_angles() {
    let Some(path) = shared("spot.obj") else { return };
    let spot = TriMesh::load(&path).unwrap();
    assert_eq!((spot.positions().len(), spot.triangles().len()), (2930, 5856));
    let enclosed = spot.enclosed_volume();
    // TetMesh::new (inside from_surface) refuses any tet that is not positively oriented.
    let mesh = TetMesh::from_surface(&spot, 0.08).unwrap();
    let error = mesh.volume() / enclosed - 1.0;
    let (smallest, largest) = mesh.dihedral_angle_range();
    eprintln!(
        "Spot at target_edge 0.08: {} vertices, {} tets, volume {:+.2} % off the enclosed {enclosed:.4}, \
         dihedral angles {smallest:.1} to {largest:.1} degrees",
        mesh.vertex_count(),
        mesh.tets().len(),
        100.0 * error
    );
    assert!(error.abs() < 0.02, "volume {:.3} % off", 100.0 * error);
    assert!(smallest >= 9.0, "smallest dihedral angle {smallest}");
    // Spot's own surface, embedded for rendering: every vertex within reach of a tet (the
    // chords between cut points leave it at most a fraction of a lattice cell outside).
    let embedding = lively::Embedding::new(&mesh, spot.positions()).unwrap();
    assert!(embedding.largest_gap() < 0.08, "gap {}", embedding.largest_gap());
    let placed = embedding.deform(mesh.positions()).unwrap();
    assert!(placed.iter().zip(spot.positions()).all(|(a, b)| (0..3).all(|c| (a[c] - b[c]).abs() < 1e-9)));
}

#[test]
fn writers_round_trip_through_the_readers() {
    let dir = scratch_dir("write");
    let mesh = TetMesh::bar([3, 2, 2], [0.3, 0.2, 0.2]);
    // A deformed frame with coordinates that need every digit.
    let moved: Vec<[f64; 3]> =
        mesh.positions().iter().map(|p| [p[0] + 0.1 * p[1] * p[1], p[1] / 3.0, p[2] + 1e-7]).collect();
    let vtk = dir.join("frame.vtk");
    mesh.save(&vtk, Some(&moved)).unwrap();
    let back = TetMesh::load(&vtk).unwrap();
    assert_eq!(back.positions(), &moved[..], "shortest round-trip digits give the same f64s");
    assert_eq!(back.tets(), mesh.tets());
    // Surfaces: every boundary triangle once, outward, through both formats.
    let surface = mesh.surface_mesh(Some(&moved)).unwrap();
    assert_eq!(surface.triangles(), mesh.surface());
    for name in ["surface.obj", "surface.ply"] {
        let path = dir.join(name);
        surface.save(&path).unwrap();
        let back = TriMesh::load(&path).unwrap();
        assert_eq!(back.positions(), surface.positions(), "{name}");
        assert_eq!(back.triangles(), surface.triangles(), "{name}");
    }
    // A ParaView series: frames on disk and listed with their times in the .pvd.
    let mut series = lively::VtuSeries::new(dir.join("series"), "bar").unwrap();
    for k in 0..3 {
        series.write_frame(&mesh, k as f64 / 30.0, Some(&moved)).unwrap();
    }
    assert_eq!(series.len(), 3);
    let pvd = std::fs::read_to_string(dir.join("series/bar.pvd")).unwrap();
    assert_eq!(pvd.matches("<DataSet").count(), 3, "{pvd}");
    assert!(pvd.contains("file=\"bar_00002.vtu\"") && pvd.contains(&format!("timestep=\"{}\"", 2.0 / 30.0)));
    let vtu = std::fs::read_to_string(dir.join("series/bar_00001.vtu")).unwrap();
    let header =
        format!("NumberOfPoints=\"{}\" NumberOfCells=\"{}\"", mesh.vertex_count(), mesh.tets().len());
    assert!(vtu.contains(&header), "{header}");
    let points = vtu.split("<Points>").nth(1).unwrap().split("</DataArray>").next().unwrap();
    let coordinates: Vec<f64> =
        points.lines().skip(2).flat_map(|l| l.split_whitespace().map(|w| w.parse().unwrap())).collect();
    assert_eq!(coordinates, moved.as_flattened());
    // Bad input is an error naming what is wrong.
    let error = mesh.save(dir.join("frame.vtk"), Some(&moved[1..])).unwrap_err().to_string();
    assert!(error.contains("positions for a mesh of"), "{error}");
    assert!(mesh.save(dir.join("frame.stl"), None).unwrap_err().to_string().contains(".vtk or .vtu"));
    assert!(surface.save(dir.join("surface.stl")).unwrap_err().to_string().contains(".obj or .ply"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn an_embedded_surface_follows_the_mesh_exactly_for_affine_motion() {
    let mesh = TetMesh::bar([4, 2, 2], [0.4, 0.2, 0.2]);
    // Points inside, on the boundary, and up to 0.05 outside the bar.
    let points: Vec<[f64; 3]> = (0..300)
        .map(|i| {
            let f = |k: u32| ((i as f64 * (0.618 + k as f64 * 0.1)) % 1.0) * 1.3 - 0.15;
            [0.4 * f(0), 0.2 * f(1), 0.2 * f(2)]
        })
        .collect();
    let embedding = lively::Embedding::new(&mesh, &points).unwrap();
    assert_eq!(embedding.len(), points.len());
    let gap = embedding.largest_gap();
    // No point is farther out than a corner of the grown box.
    let farthest = (0.06f64.powi(2) + 2.0 * 0.03f64.powi(2)).sqrt();
    assert!(gap > 0.0 && gap <= farthest + 1e-12, "largest gap {gap}");
    // Barycentric (and extrapolated) coordinates reproduce any affine map exactly.
    let affine = |p: [f64; 3]| {
        [1.1 * p[0] - 0.3 * p[1] + 0.2, 0.4 * p[0] + 0.9 * p[1] + 0.1 * p[2], -0.2 * p[1] + 1.3 * p[2] - 1.0]
    };
    let moved: Vec<[f64; 3]> = mesh.positions().iter().map(|&p| affine(p)).collect();
    let placed = embedding.deform(&moved).unwrap();
    for (p, q) in points.iter().zip(&placed) {
        let expected = affine(*p);
        assert!((0..3).all(|c| (q[c] - expected[c]).abs() < 1e-12), "{p:?}: {q:?} vs {expected:?}");
    }
    assert!(embedding.deform(&moved[1..]).unwrap_err().to_string().contains("positions given"));
}

#[test]
fn an_embedding_in_a_flat_mesh_stays_small() {
    // A 1 km x 1 km sheet one millimetre thick: its bounding box holds almost no volume.
    let mesh = TetMesh::bar([4, 4, 1], [1000.0, 1000.0, 0.001]);
    let points = [[500.0, 500.0, 0.0005], [10.0, 990.0, 0.0], [2000.0, 0.0, 0.0]];
    let embedding = lively::Embedding::new(&mesh, &points).unwrap();
    let placed = embedding.deform(mesh.positions()).unwrap();
    for (p, q) in points.iter().zip(&placed) {
        assert!((0..3).all(|c| (p[c] - q[c]).abs() < 1e-6), "{p:?} -> {q:?}");
    }
    assert!((embedding.largest_gap() - 1000.0).abs() < 1e-6, "{}", embedding.largest_gap());
}
