//! Symplectic Euler: `v' = v + h M^-1 f(x)`, then `x' = x + h v'`.

use super::{StepInput, combine};

pub(crate) fn step(input: &StepInput<'_>) -> (Vec<[f64; 3]>, Vec<[f64; 3]>) {
    let h = input.dt;
    let v = combine([(1.0, input.velocities), (h, input.acceleration)]);
    (combine([(1.0, input.positions), (h, &v)]), v)
}
