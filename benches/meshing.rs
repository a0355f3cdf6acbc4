//! Tetrahedralization by isosurface stuffing (`TetMesh::from_surface`) and loading.
//!
//! `cargo bench --bench meshing` — each case first prints its vertices, tets, volume error and
//! dihedral-angle range, then criterion times it. Cases: Spot (`../shared/meshes/spot.obj`,
//! skipped with the reason printed when absent) at about 18K and 73K tets, and loading the
//! 19K-tet bunny.

use criterion::{Criterion, criterion_group, criterion_main};
use lively::{TetMesh, TriMesh};

fn meshing(c: &mut Criterion) {
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/meshes");
    let mut group = c.benchmark_group("meshing");
    group.sample_size(10);
    match TriMesh::load(folder.join("spot.obj")) {
        Ok(spot) => {
            let enclosed = spot.enclosed_volume();
            for edge in [0.08, 0.05] {
                let mesh = TetMesh::from_surface(&spot, edge).unwrap();
                let (smallest, largest) = mesh.dihedral_angle_range();
                println!(
                    "spot at target_edge {edge}: {} vertices, {} tets, volume {:+.2} %, dihedral {smallest:.1}..{largest:.1} degrees",
                    mesh.vertex_count(),
                    mesh.tets().len(),
                    100.0 * (mesh.volume() / enclosed - 1.0)
                );
                group.bench_function(format!("stuff_spot_{}", mesh.tets().len()), |b| {
                    b.iter(|| TetMesh::from_surface(&spot, edge).unwrap())
                });
            }
        }
        Err(e) => eprintln!("skipping the Spot cases: {e}"),
    }
    let bunny = folder.join("ipc-bunny-19k.msh");
    if bunny.exists() {
        group.bench_function("load_bunny_19379", |b| b.iter(|| TetMesh::load(&bunny).unwrap()));
    } else {
        eprintln!("skipping load_bunny_19379: {} is absent", bunny.display());
    }
    group.finish();
}

// No HTML plots: plotters is built with the crate's ab_glyph text, which criterion's plots
// cannot draw with (they panic on a rerun, when they compare against the last one).
criterion_group! {
    name = benches;
    config = Criterion::default().without_plots();
    targets = meshing
}
criterion_main!(benches);
