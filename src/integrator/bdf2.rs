//! BDF2: `y = 4/3 x_n - 1/3 x_{n-1} + 2/9 h (4 v_n - v_{n-1})`, node `(4/9, 1)`,
//! `v = (3x - 4x_n + x_{n-1}) / (2h)`. Without a previous step it is backward Euler.

use super::backward_euler::BackwardEuler;
use super::{Plan, Scheme, StepInput, combine};
use crate::objective::Node;

pub(crate) struct Bdf2;

impl Scheme for Bdf2 {
    fn plan(&self, input: &StepInput<'_>) -> Plan {
        let Some((x_prev, v_prev)) = input.previous else {
            return BackwardEuler.plan(input);
        };
        let h = input.dt;
        Plan {
            target: combine([
                (4.0 / 3.0, input.positions),
                (-1.0 / 3.0, x_prev),
                (8.0 / 9.0 * h, input.velocities),
                (-2.0 / 9.0 * h, v_prev),
            ]),
            nodes: vec![Node { weight: 4.0 / 9.0, theta: 1.0 }],
            inertial: false,
        }
    }

    fn velocity(&self, input: &StepInput<'_>, x: &[[f64; 3]]) -> Vec<[f64; 3]> {
        let Some((x_prev, _)) = input.previous else {
            return BackwardEuler.velocity(input, x);
        };
        let h = input.dt;
        combine([(1.5 / h, x), (-2.0 / h, input.positions), (0.5 / h, x_prev)])
    }

    fn damping_weight(&self, input: &StepInput<'_>) -> f64 {
        if input.previous.is_some() { 4.0 / 9.0 } else { BackwardEuler.damping_weight(input) }
    }
}
