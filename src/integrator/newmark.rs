//! Newmark, beta = 1/4, gamma = 1/2: `y = x_n + h v_n + h^2/4 M^-1 f(x_n)`, node `(1/4, 1)`,
//! `v = 2(x - x_n)/h - v_n`.

use super::{Plan, Scheme, StepInput, combine, trapezoidal_velocity};
use crate::objective::Node;

pub(crate) struct Newmark;

impl Scheme for Newmark {
    fn plan(&self, input: &StepInput<'_>) -> Plan {
        let h = input.dt;
        Plan {
            target: combine([
                (1.0, input.positions),
                (h, input.velocities),
                (h * h / 4.0, input.acceleration),
            ]),
            nodes: vec![Node { weight: 0.25, theta: 1.0 }],
            inertial: false,
        }
    }

    fn velocity(&self, input: &StepInput<'_>, x: &[[f64; 3]]) -> Vec<[f64; 3]> {
        trapezoidal_velocity(input, x)
    }
}
