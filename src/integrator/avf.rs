//! Average Vector Field with Simpson's rule: `y = x_n + h v_n + h^2/12 M^-1 f(x_n)`, nodes
//! `(2/3, 1/2)` and `(1/12, 1)`, `v = 2(x - x_n)/h - v_n`. Simpson's rule integrates the
//! cubic StVK forces exactly, so the discrete energy is conserved exactly.

use super::{Plan, Scheme, StepInput, combine, trapezoidal_velocity};
use crate::objective::Node;

pub(crate) struct Avf;

impl Scheme for Avf {
    fn plan(&self, input: &StepInput<'_>) -> Plan {
        let h = input.dt;
        Plan {
            target: combine([
                (1.0, input.positions),
                (h, input.velocities),
                (h * h / 12.0, input.acceleration),
            ]),
            nodes: vec![Node { weight: 2.0 / 3.0, theta: 0.5 }, Node { weight: 1.0 / 12.0, theta: 1.0 }],
            inertial: false,
        }
    }

    fn velocity(&self, input: &StepInput<'_>, x: &[[f64; 3]]) -> Vec<[f64; 3]> {
        trapezoidal_velocity(input, x)
    }
}
