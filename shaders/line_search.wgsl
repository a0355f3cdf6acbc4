// Stage `line_search`: the decisions of a fixed-budget Newton or mixed-FEM solve, made on the device so
// that the host records the whole solve and reads it back once. The twin of
// src/backend/cpu/line_search.rs (`pick` and `choose`, the same rules in f32), with the
// reductions that bring its inputs together: `energy` sums an objective's element and
// vertex partials into a slot, `after_solve` the gather's and the dots' partials. Every
// reduction runs in one workgroup in a fixed order, so the decisions are the same bits every
// run. `take_guess`, `start_search` and `advance` act on them, vertex-parallel; `bound` takes
// the local/global step's length from the contact stage's bounds.

#import shared/reduce
#import shared/search

struct Params {
    vertex_count: u32,
    energy_partial_count: u32,
    vertex_partial_count: u32,
    // The candidate slot `energy` writes (VALUE: the iterate's objective), or the guess
    // `take_guess` loads (PICKED: the one `pick` chose).
    slot: u32,
    // Halvings (`choose`), guesses (`pick`), or the tets' slope partials `after_solve` adds
    // (a mixed-FEM direction's).
    count: u32,
    // `choose`: alpha = 2 was evaluated into slot `count`.
    extrapolate: u32,
    // `pick`: the last guess counts only when no other is finite.
    fallback: u32,
}

const VALUE: u32 = 0xffffffffu;
const PICKED: u32 = 0xffffffffu;
const NONE: u32 = 0xffffffffu;
const ARMIJO: f32 = 1e-4;
const NOISE_MARGIN: f32 = 10.0;
// After a batch that found no decrease, the next starts at half its shortest step (1/64).
const NEXT_BATCH: f32 = 0.0078125;
// The relative resolution of an objective summed in f32.
const PRECISION: f32 = 1.1920929e-7;

@group(0) @binding(0) var<uniform> params: Params;

@group(2) @binding(0) var<storage, read_write> x: array<f32>;

@group(3) @binding(0) var<storage, read_write> x_saved: array<f32>;
@group(3) @binding(1) var<storage, read_write> direction: array<f32>;
@group(3) @binding(2) var<storage, read> energy_partials: array<f32>;
@group(3) @binding(3) var<storage, read> gather_partials: array<vec4<f32>>;
@group(3) @binding(4) var<storage, read> dot_partials: array<vec4<f32>>;
@group(3) @binding(5) var<storage, read_write> search: Search;
// A batch of positions evaluated at once, one after another (displacements, 3 per vertex):
// the initial guesses, later a line search's candidates.
@group(3) @binding(6) var<storage, read> batch: array<f32>;
// The contact stage's per-workgroup bounds on the step.
@group(3) @binding(7) var<storage, read> bound_partials: array<f32>;

fn is_finite(v: f32) -> bool {
    return abs(v) < bitcast<f32>(0x7f800000u);
}

// The objective of each member of the last energy passes, a workgroup each: its element
// energy partials and the gather's vertex energies, into the candidate slots from `slot` on
// (or, for VALUE, the iterate's own objective).
@compute @workgroup_size(WORKGROUP)
fn energy(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let member = group.x;
    let elements = member * params.energy_partial_count;
    let vertices = member * params.vertex_partial_count;
    var sum = 0.0;
    for (var i = lid; i < params.energy_partial_count; i += WORKGROUP) {
        sum += energy_partials[elements + i];
    }
    for (var i = lid; i < params.vertex_partial_count; i += WORKGROUP) {
        sum += gather_partials[vertices + i].x;
    }
    let total = workgroup_sum(lid, vec4<f32>(sum, 0.0, 0.0, 0.0)).x;
    if (lid == 0u) {
        if (params.slot == VALUE) {
            search.value = total;
        } else {
            search.candidates[params.slot + member] = total;
        }
    }
}

// After a solve: |grad G|, the force scale and the noise floor of the linearization's gather
// (its partials are still in place), and the slope and length of the direction from the
// dots' partials (g.d, d.d, g.g). A mixed-FEM direction's slope also takes the tets' part of
// the merit's (`params.count` energy partials, from the mixed stage's `local_update`), and is
// never rescaled: its stretches' step is not linear in the positions'.
@compute @workgroup_size(WORKGROUP)
fn after_solve(@builtin(local_invocation_index) lid: u32) {
    var gathered = vec4<f32>(0.0);
    var dots = vec4<f32>(0.0);
    for (var i = lid; i < params.vertex_partial_count; i += WORKGROUP) {
        gathered += gather_partials[i];
        dots += dot_partials[i];
    }
    for (var i = lid; i < params.count; i += WORKGROUP) {
        dots.w += energy_partials[i];
    }
    let linearization = workgroup_sum(lid, gathered);
    let total = workgroup_sum(lid, dots);
    if (lid == 0u) {
        if (params.count != 0u) {
            search.scale = 1.0;
        }
        search.gradient_norm = sqrt(linearization.y);
        search.force_scale = linearization.z;
        search.noise_floor = sqrt(linearization.w);
        // Of the direction `start_search` makes.
        search.slope = (total.x + total.w) * search.scale;
        search.direction_norm = sqrt(total.y) * search.scale;
    }
}

// The lowest finite candidate in [first, end), the first of equals; NONE if none is finite.
fn lowest(first: u32, end: u32) -> u32 {
    var best = NONE;
    for (var k = first; k < end; k++) {
        let v = search.candidates[k];
        if (is_finite(v) && (best == NONE || v < search.candidates[best])) {
            best = k;
        }
    }
    return best;
}

// The initial guess: the lowest finite objective of the `count` guesses in the candidate
// slots; with `fallback`, the last competes only when some other is not finite.
@compute @workgroup_size(1)
fn pick() {
    let primary = params.count - select(0u, 1u, params.fallback != 0u && params.count > 0u);
    var competing = primary;
    for (var k = 0u; k < primary; k++) {
        if (!is_finite(search.candidates[k])) {
            competing = params.count;
        }
    }
    let best = lowest(0u, competing);
    search.picked = best;
    search.scale = 1.0;
    if (best == NONE) {
        search.value = bitcast<f32>(0x7f800000u);
    } else {
        search.value = search.candidates[best];
    }
}

// The step along the direction (the CPU twin's `choose`): none without descent; below the
// noise the full step if G stays flat; else the longest step of the batch with Armijo's
// decrease, extended to 2 when that decreases G further; none when none decreases G enough.
@compute @workgroup_size(1)
fn choose() {
    let value = search.value;
    let slope = search.slope;
    var alpha = 0.0;
    var next = value;
    let noise = NOISE_MARGIN * (search.noise_floor + PRECISION * abs(value));
    if (slope < 0.0) {
        if (-slope <= noise) {
            if (search.candidates[0] <= value + noise) {
                alpha = 1.0;
                next = search.candidates[0];
            }
        } else {
            var step = 1.0;
            for (var k = 0u; k < params.count; k++) {
                let v = search.candidates[k];
                if (is_finite(v) && v <= value + ARMIJO * step * slope) {
                    alpha = step;
                    next = v;
                    if (k == 0u && params.extrapolate != 0u) {
                        let doubled = search.candidates[params.count];
                        if (is_finite(doubled) && doubled < v && doubled <= value + ARMIJO * 2.0 * slope) {
                            alpha = 2.0;
                            next = doubled;
                        }
                    }
                    break;
                }
                // 1, 1/2, 1/4, 1/8, then an eighth of the last (`step_length`).
                step *= select(0.5, 0.125, k >= 3u);
            }
        }
    }
    search.alpha = alpha;
    search.value = next;
    // A batch that found no decrease along a descent direction: the next iteration, from the
    // same iterate, goes on where it stopped (`cpu::line_search::next_scale`).
    if (alpha == 0.0 && slope < 0.0) {
        search.scale *= NEXT_BATCH;
    } else {
        search.scale = 1.0;
    }
}

// The step length: the least of the contact stage's bounds (`advance` takes it).
@compute @workgroup_size(WORKGROUP)
fn bound(@builtin(local_invocation_index) lid: u32) {
    var least = 1.0;
    for (var i = lid; i < params.vertex_partial_count; i += WORKGROUP) {
        least = min(least, bound_partials[i]);
    }
    let total = workgroup_min(lid, least);
    if (lid == 0u) {
        search.alpha = total;
    }
}

// The line search starts from here: x_saved = x, and d *= scale (see `Search::scale`).
@compute @workgroup_size(WORKGROUP)
fn start_search(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let index = workgroup_slot(group, groups) * WORKGROUP + lid;
    if (index < 3u * params.vertex_count) {
        x_saved[index] = x[index];
        direction[index] *= search.scale;
    }
}

// x = guess `slot` (or the one `pick` chose).
@compute @workgroup_size(WORKGROUP)
fn take_guess(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let index = workgroup_slot(group, groups) * WORKGROUP + lid;
    var guess = params.slot;
    if (guess == PICKED) {
        guess = select(search.picked, 0u, search.picked == NONE);
    }
    let n = 3u * params.vertex_count;
    if (index < n) {
        x[index] = batch[guess * n + index];
    }
}

// x = x_saved + alpha d, with the step `choose` took.
@compute @workgroup_size(WORKGROUP)
fn advance(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let index = workgroup_slot(group, groups) * WORKGROUP + lid;
    if (index < 3u * params.vertex_count) {
        x[index] = x_saved[index] + search.alpha * direction[index];
    }
}
