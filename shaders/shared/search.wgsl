// The record of a budgeted solve's decisions (`line_search`), which the mixed stage's
// `advance_chosen` reads too, and the step lengths its line searches evaluate.

// What the solve knows of its iterate and direction; the host stages a copy after every
// iteration, as its record.
struct Search {
    // G at the iterate.
    value: f32,
    // The step length taken last.
    alpha: f32,
    gradient_norm: f32,
    force_scale: f32,
    // The first-order change of G when the positions round (see the gather).
    noise_floor: f32,
    // grad G . d and |d|.
    slope: f32,
    direction_norm: f32,
    // The guess taken; NONE when no guess has a finite objective.
    picked: u32,
    // What the next direction is scaled by: 1, or after a batch found no decrease, the step
    // after its last (the host's search would have gone on halving).
    scale: f32,
    candidates: array<f32, 8>,
}

// The k-th step length of a line search's batch: 1, 1/2, 1/4, 1/8, then an eighth of the last
// (`cpu::line_search::step_length`).
fn step_length(k: u32) -> f32 {
    return 1.0 / f32(1u << select(k, 3u * k - 6u, k > 3u));
}
