//! The fixed-step driver for a variable frame clock: steps owed by the accumulated time, at
//! most a cap per frame, the dropped time and the carried remainder reported, bad input refused.

mod common;

use lively::{Error, FixedStep, Integrator};

#[test]
fn frames_at_sixty_hertz_step_a_thirty_hertz_simulation_every_other_frame() {
    let mut sim = common::stretched_bar(Integrator::BackwardEuler, 1e5, 1.1);
    let dt = sim.dt();
    assert!((dt - 1.0 / 30.0).abs() < 1e-15);
    let mut driver = FixedStep::new(4).unwrap();
    let mut steps = Vec::new();
    for _ in 0..60 {
        let frame = driver.advance(&mut sim, 1.0 / 60.0).unwrap();
        assert_eq!(frame.dropped, 0.0);
        assert!((0.0..1.0).contains(&frame.remainder), "remainder {}", frame.remainder);
        steps.push(frame.steps.len());
    }
    assert_eq!(steps.iter().sum::<usize>(), 30);
    assert!(steps.chunks(2).all(|pair| pair.iter().sum::<usize>() == 1), "{steps:?}");
    assert!((sim.time() - 1.0).abs() < 1e-9, "time {}", sim.time());
}

#[test]
fn a_long_frame_takes_at_most_the_cap_and_drops_the_rest() {
    let mut sim = common::stretched_bar(Integrator::BackwardEuler, 1e5, 1.1);
    let dt = sim.dt();
    let mut driver = FixedStep::new(4).unwrap();
    // 0.55 s owes 16 steps and half a step: 4 are taken, 12 dropped, the half carried.
    let frame = driver.advance(&mut sim, 0.55).unwrap();
    assert_eq!(frame.steps.len(), 4);
    assert!((frame.dropped - 12.0 * dt).abs() < 1e-12, "dropped {}", frame.dropped);
    assert!((frame.remainder - 0.5).abs() < 1e-9, "remainder {}", frame.remainder);
    assert!((sim.time() - 4.0 * dt).abs() < 1e-12);
    // The carried half step and another half make one.
    assert_eq!(driver.advance(&mut sim, 0.5 * dt).unwrap().steps.len(), 1);
}

#[test]
fn bad_frame_times_and_caps_are_refused_without_a_step() {
    assert!(matches!(FixedStep::new(0), Err(Error::Parameter(_))));
    let mut sim = common::stretched_bar(Integrator::BackwardEuler, 1e5, 1.1);
    let mut driver = FixedStep::new(2).unwrap();
    let before = sim.positions().to_vec();
    for elapsed in [f64::NAN, -0.01, f64::INFINITY] {
        assert!(matches!(driver.advance(&mut sim, elapsed), Err(Error::Parameter(_))), "{elapsed}");
    }
    assert_eq!(sim.positions(), &before[..]);
    assert_eq!(sim.time(), 0.0);
    let dt = sim.dt();
    assert_eq!(driver.advance(&mut sim, 0.9 * dt).unwrap().steps.len(), 0);
}
