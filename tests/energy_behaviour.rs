//! The energy behaviour each integrator's paper claims, at the papers' own parameters.

mod common;

use common::{rotating_spring, stretched_bar};
use lively::{Integrator, Material, Simulation, Solver, SpringKind, SpringMesh, TetMesh};

/// Relative energy error of a run against its initial total.
fn relative_drift(sim: &mut Simulation, steps: usize) -> (f64, Vec<f64>) {
    let h0 = sim.energy().total;
    let mut history = Vec::with_capacity(steps);
    let mut worst = 0.0_f64;
    for step in 0..steps {
        let stats = sim.step().unwrap_or_else(|e| panic!("step {step}: {e}"));
        assert!(stats.converged || stats.round_off, "step {step} did not converge: {stats:?}");
        let h = sim.energy().total / h0;
        worst = worst.max((h - 1.0).abs());
        history.push(h);
    }
    (worst, history)
}

#[test]
fn avf_conserves_stvk_body_energy_over_hundreds_of_large_steps() {
    // 300 steps of h = 1/30 s of a bar stretched 30 %: large, nonlinear oscillation.
    let mut sim = stretched_bar(Integrator::Avf, 1e5, 1.3);
    let (worst, _) = relative_drift(&mut sim, 300);
    println!("AVF stretched bar: max |H/H0 - 1| over 300 steps = {worst:.2e}");
    // Newton stops at |grad| <= 1e-8 N; each step's energy error is about residual times
    // displacement (1e-8 N x 0.1 m), so 300 steps stay many orders below 1e-7 of H0 (~200 J).
    assert!(worst < 1e-7, "AVF drifted by {worst:e} of H0");
}

#[test]
fn avf_conserves_stvk_body_energy_under_gravity_with_pins() {
    let mesh = TetMesh::bar([8, 2, 2], [0.8, 0.2, 0.2]);
    let mut sim = Simulation::builder()
        .tet_body(mesh, Material::stvk(2e5, 0.3), 1000.0)
        .gravity([0.0, -9.81, 0.0])
        .integrator(Integrator::Avf)
        .solver(Solver::newton().tolerance(1e-8))
        .pin(|p| p[0] < 1e-9)
        .build()
        .unwrap();
    let (worst, history) = relative_drift(&mut sim, 200);
    // H0 is the potential at rest (gravity only, ~ -1000 J scale); same budget as above.
    assert!(worst < 1e-7, "AVF drifted by {worst:e} of |H0|; history tail {:?}", &history[190..]);
}

#[test]
fn avf_conserves_stvk_spring_energy() {
    let mut sim = rotating_spring(Integrator::Avf);
    let (worst, _) = relative_drift(&mut sim, 300);
    println!("AVF rotating spring: max |H/H0 - 1| over 300 steps = {worst:.2e}");
    // H0 = 78 kJ; the residual is 1e-9 N, so conservation holds to round-off of the solve.
    assert!(worst < 1e-9, "AVF drifted by {worst:e} of H0 on the rotating spring");
}

#[test]
fn implicit_midpoint_explodes_on_the_rotating_spring() {
    // Stabilizing-integrators paper, Fig. 2-3: with h = 0.033 the energy climbs by orders of
    // magnitude within the first steps.
    let mut sim = rotating_spring(Integrator::ImplicitMidpoint);
    let h0 = sim.energy().total;
    let mut peak = 1.0_f64;
    for _ in 0..30 {
        if sim.step().is_err() {
            break;
        }
        peak = peak.max(sim.energy().total / h0);
    }
    println!("implicit midpoint on the rotating spring peaks at {peak:.3e} H0 within 30 steps");
    assert!(peak > 100.0, "implicit midpoint only reached {peak} H0");
}

#[test]
fn implicit_midpoint_stays_bounded_with_the_papers_small_step() {
    // The paper's h_small = 0.00033 s run of the same spring contracts as expected.
    let mesh = SpringMesh::new(vec![[0.0; 3], [1.5, 0.0, 0.0]], vec![1.0, 0.5]).spring_with_rest(
        0,
        1,
        1.0,
        1e5,
        SpringKind::StVK,
    );
    let mut sim = Simulation::builder()
        .spring_body(mesh)
        .dt(0.00033)
        .integrator(Integrator::ImplicitMidpoint)
        .solver(Solver::newton().tolerance(1e-9))
        .pin(|p| p[0] == 0.0)
        .build()
        .unwrap();
    sim.set_state(&[[0.0; 3], [1.5, 0.0, 0.0]], &[[0.0; 3], [0.0, 10.0, 0.0]]).unwrap();
    let h0 = sim.energy().total;
    let mut deviation = Vec::new();
    for _ in 0..600 {
        sim.step().unwrap();
        deviation.push((sim.energy().total / h0 - 1.0).abs());
        let r = sim.positions()[1];
        let radius = (r[0] * r[0] + r[1] * r[1] + r[2] * r[2]).sqrt();
        // The paper's red circle: the spring never extends past its initial 1.5 m.
        assert!(radius < 1.5 + 1e-6, "spring left the red circle: |x| = {radius}");
    }
    let early = deviation[..300].iter().cloned().fold(0.0, f64::max);
    let late = deviation[300..].iter().cloned().fold(0.0, f64::max);
    println!("small-step midpoint: max |H/H0 - 1| {early:.3e} (first 300 steps), {late:.3e} (next 300)");
    // omega h ~ 0.5 at the stretched length, so midpoint's energy error oscillates with an
    // amplitude of order (omega h)^2 / 4 ~ 0.06; what matters is that it does not grow.
    assert!(early < 0.1, "energy oscillation too large: {early}");
    assert!(late < 1.05 * early, "energy error grew: {early} -> {late}");
}

#[test]
fn backward_euler_and_bdf2_dissipate_and_bdf2_less() {
    // A soft bar (E 2e4) oscillating slowly enough that 1 s holds several periods.
    let mut be = stretched_bar(Integrator::BackwardEuler, 2e4, 1.2);
    let mut bdf2 = stretched_bar(Integrator::Bdf2, 2e4, 1.2);
    let h0 = be.energy().total;
    let mut previous = h0;
    for step in 0..30 {
        be.step().unwrap();
        bdf2.step().unwrap();
        let h = be.energy().total;
        // Backward Euler never gains energy (round-off aside).
        assert!(
            h <= previous * (1.0 + 1e-12),
            "backward Euler gained energy at step {step}: {previous} -> {h}"
        );
        previous = h;
    }
    let (e_be, e_bdf2) = (be.energy().total / h0, bdf2.energy().total / h0);
    println!("after 1 s: backward Euler keeps {e_be:.3e} of H0, BDF2 {e_bdf2:.3e}");

    assert!(e_bdf2 < 0.9, "BDF2 should dissipate visibly, kept {e_bdf2}");
    assert!(
        e_bdf2 > 2.0 * e_be,
        "BDF2 should keep clearly more energy than backward Euler: {e_bdf2} vs {e_be}"
    );
}
