//! How each implicit integrator handles self-collision at the game step: three 0.2 m cubes
//! stacked with 1 cm gaps onto a plane (friction 0.5 everywhere, self-collision stiffness
//! 1e7 N/m^2), square or staggered by 1 cm, soft (E 1e5 Pa) or stiffer (1e6), with and
//! without Rayleigh damping 0.01 s, 3 s at h = 1/30 s. Prints, per run: the top of the stack
//! at the end (0.6 m standing), the deepest penetration, the largest excess of the energy over
//! the ledger's target, and the final energy and target.
//!
//! `cargo run --release --example self_collision_integrators`
//!
//! A-1, Newmark and implicit midpoint are refused with self-collision; docs/contact.md
//! records what they did before they were.

use lively::{Collider, ContactModel, Damping, Integrator, Material, SelfCollision, Simulation, TetMesh};

fn main() -> lively::Result<()> {
    let integrators = [
        Integrator::BackwardEuler,
        Integrator::Bdf2,
        Integrator::Stabilized { epsilon: 0.01 },
        Integrator::ASearch { alpha_min: 0.0, alpha_max: 1.1, decay: None },
        Integrator::Avf,
    ];
    println!(
        "| integrator | cubes | damping | top (m) | deepest (m) | worst excess (J) | energy -> target (J) |"
    );
    println!("|---|---|---|---:|---:|---:|---|");
    for integrator in integrators {
        for (label, youngs, offset) in
            [("square, E 1e6", 1e6, 0.0), ("square, E 1e5", 1e5, 0.0), ("staggered, E 1e5", 1e5, 0.01)]
        {
            for damped in [true, false] {
                let mut builder = Simulation::builder()
                    .gravity([0.0, -9.81, 0.0])
                    .dt(1.0 / 30.0)
                    .integrator(integrator.clone())
                    .collider(Collider::plane([0.0, 1.0, 0.0], 0.0).friction(0.5))
                    .contact_model(ContactModel::Penalty { stiffness: 1e5 })
                    .self_collision(SelfCollision { stiffness: 1e7, friction: 0.5 });
                for k in 0..3 {
                    let mesh = TetMesh::bar([3; 3], [0.2; 3]);
                    let shift = [k as f64 * offset, k as f64 * 0.21, k as f64 * offset];
                    let moved =
                        mesh.positions().iter().map(|p| std::array::from_fn(|i| p[i] + shift[i])).collect();
                    let cube = TetMesh::new(moved, mesh.tets().to_vec())?;
                    builder = builder.tet_body(cube, Material::stable_neo_hookean(youngs, 0.3), 1000.0);
                }
                if damped {
                    builder = builder.damping(Damping::Rayleigh { stiffness: 0.01 });
                }
                let mut sim = builder.build()?;
                let (mut deepest, mut worst) = (0.0f64, 0.0f64);
                let mut failed = false;
                for _ in 0..90 {
                    if sim.step().is_err() {
                        failed = true;
                        break;
                    }
                    deepest = deepest.max(sim.model().self_penetration(sim.positions())?);
                    let energy = sim.energy();
                    worst = worst.max(energy.total - energy.target);
                }
                let top = sim.positions().iter().map(|p| p[1]).fold(f64::NEG_INFINITY, f64::max);
                let energy = sim.energy();
                let name = format!("{integrator:?}").split_whitespace().next().unwrap_or("").to_string();
                println!(
                    "| {name} | {label} | {} | {top:.3} | {deepest:.1e} | {worst:.3} | {:.2} -> {:.2}{} |",
                    if damped { "Rayleigh 0.01" } else { "none" },
                    energy.total,
                    energy.target,
                    if failed { " (a step failed)" } else { "" }
                );
            }
        }
    }
    Ok(())
}
