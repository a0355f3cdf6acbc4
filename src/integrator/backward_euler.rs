//! Backward Euler: `y = x_n + h v_n`, one node at the end point, `v = (x - x_n)/h`.

use super::{Plan, Scheme, StepInput, combine};
use crate::objective::Node;

pub(crate) struct BackwardEuler;

impl Scheme for BackwardEuler {
    fn plan(&self, input: &StepInput<'_>) -> Plan {
        Plan {
            target: combine([(1.0, input.positions), (input.dt, input.velocities)]),
            nodes: vec![Node { weight: 1.0, theta: 1.0 }],
            inertial: true,
        }
    }

    fn velocity(&self, input: &StepInput<'_>, x: &[[f64; 3]]) -> Vec<[f64; 3]> {
        combine([(1.0 / input.dt, x), (-1.0 / input.dt, input.positions)])
    }

    fn damping_weight(&self, _input: &StepInput<'_>) -> f64 {
        1.0
    }
}
