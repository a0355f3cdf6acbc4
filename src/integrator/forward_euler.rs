//! Forward Euler: `x' = x + h v`, `v' = v + h M^-1 f(x)`.

use super::{StepInput, combine};

pub(crate) fn step(input: &StepInput<'_>) -> (Vec<[f64; 3]>, Vec<[f64; 3]>) {
    let h = input.dt;
    (
        combine([(1.0, input.positions), (h, input.velocities)]),
        combine([(1.0, input.velocities), (h, input.acceleration)]),
    )
}
