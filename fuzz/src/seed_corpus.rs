//! Writes the fuzzers' seed corpus: a small generated bar in every format the readers take
//! (`cargo run --bin seed_corpus` from this folder; it fills `seeds/<target>/`).

use std::fmt::Write as _;
use std::path::Path;

use lively::TetMesh;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let mesh = TetMesh::bar([2, 1, 1], [0.2, 0.1, 0.1]);
    let (p, t) = (mesh.positions(), mesh.tets());
    let mut files: Vec<(&str, &str, Vec<u8>)> = Vec::new();

    let mut gmsh2 = format!("$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Nodes\n{}\n", p.len());
    for (i, q) in p.iter().enumerate() {
        writeln!(gmsh2, "{} {} {} {}", i + 1, q[0], q[1], q[2])?;
    }
    writeln!(gmsh2, "$EndNodes\n$Elements\n{}", t.len())?;
    for (k, v) in t.iter().enumerate() {
        writeln!(gmsh2, "{} 4 2 0 1 {} {} {} {}", k + 1, v[0] + 1, v[1] + 1, v[2] + 1, v[3] + 1)?;
    }
    gmsh2.push_str("$EndElements\n");
    files.push(("gmsh", "bar-2.2", gmsh2.into_bytes()));

    let mut gmsh4 =
        format!("$MeshFormat\n4.1 0 8\n$EndMeshFormat\n$Nodes\n1 {n} 1 {n}\n3 1 0 {n}\n", n = p.len());
    for i in 0..p.len() {
        writeln!(gmsh4, "{}", i + 1)?;
    }
    for q in p {
        writeln!(gmsh4, "{} {} {}", q[0], q[1], q[2])?;
    }
    writeln!(gmsh4, "$EndNodes\n$Elements\n1 {n} 1 {n}\n3 1 4 {n}", n = t.len())?;
    for (k, v) in t.iter().enumerate() {
        writeln!(gmsh4, "{} {} {} {} {}", k + 1, v[0] + 1, v[1] + 1, v[2] + 1, v[3] + 1)?;
    }
    gmsh4.push_str("$EndElements\n");
    files.push(("gmsh", "bar-4.1", gmsh4.into_bytes()));

    let mut tetgen = format!("{} 3 0 0\n", p.len());
    for (i, q) in p.iter().enumerate() {
        writeln!(tetgen, "{i} {} {} {}", q[0], q[1], q[2])?;
    }
    tetgen.push('\0');
    writeln!(tetgen, "{} 4 0", t.len())?;
    for (k, v) in t.iter().enumerate() {
        writeln!(tetgen, "{k} {} {} {} {}", v[0], v[1], v[2], v[3])?;
    }
    files.push(("tetgen", "bar", tetgen.into_bytes()));

    let mut medit = format!("MeshVersionFormatted 1\nDimension 3\nVertices\n{}\n", p.len());
    for q in p {
        writeln!(medit, "{} {} {} 0", q[0], q[1], q[2])?;
    }
    writeln!(medit, "Tetrahedra\n{}", t.len())?;
    for v in t {
        writeln!(medit, "{} {} {} {} 0", v[0] + 1, v[1] + 1, v[2] + 1, v[3] + 1)?;
    }
    medit.push_str("End\n");
    files.push(("medit", "bar", medit.into_bytes()));

    // The crate's own writers for the rest.
    let scratch = std::env::temp_dir().join(format!("lively-seed-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    mesh.save(scratch.join("bar.vtk"), None)?;
    let surface = mesh.surface_mesh(None)?;
    surface.save(scratch.join("bar.obj"))?;
    surface.save(scratch.join("bar.ply"))?;
    for (target, name) in [("vtk", "bar.vtk"), ("obj", "bar.obj"), ("ply", "bar.ply")] {
        files.push((target, "bar", std::fs::read(scratch.join(name))?));
    }
    std::fs::remove_dir_all(&scratch)?;

    for (target, name, bytes) in files {
        let folder = corpus.join(target);
        std::fs::create_dir_all(&folder)?;
        std::fs::write(folder.join(name), bytes)?;
    }
    println!("seed corpus written to {}", corpus.display());
    Ok(())
}
