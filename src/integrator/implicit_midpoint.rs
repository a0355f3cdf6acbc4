//! Implicit midpoint: `y = x_n + h v_n`, node `(1, 1/2)`, `v = 2(x - x_n)/h - v_n`.

use super::{Plan, Scheme, StepInput, combine, trapezoidal_velocity};
use crate::objective::Node;

pub(crate) struct ImplicitMidpoint;

impl Scheme for ImplicitMidpoint {
    fn plan(&self, input: &StepInput<'_>) -> Plan {
        Plan {
            target: combine([(1.0, input.positions), (input.dt, input.velocities)]),
            nodes: vec![Node { weight: 1.0, theta: 0.5 }],
            inertial: true,
        }
    }

    fn velocity(&self, input: &StepInput<'_>, x: &[[f64; 3]]) -> Vec<[f64; 3]> {
        trapezoidal_velocity(input, x)
    }
}
