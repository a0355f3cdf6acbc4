// Stage `vector`: the per-vertex vector updates and reductions Newton needs on the GPU, the
// twin of src/backend/cpu/vector.rs and the vector loops of src/backend/cpu/mod.rs. Dot
// products are summed per workgroup in a fixed tree order; the host adds the partials in
// order.

#import shared/reduce

struct Params {
    vertex_count: u32,
    alpha: f32,
    // `batch_offsets`: how many candidates, and their step lengths.
    count: u32,
    steps: array<vec4<f32>, 2>,
}

@group(0) @binding(0) var<uniform> params: Params;

@group(2) @binding(0) var<storage, read_write> x: array<f32>;

@group(3) @binding(0) var<storage, read_write> x_saved: array<f32>;
@group(3) @binding(1) var<storage, read_write> direction: array<f32>;
@group(3) @binding(2) var<storage, read_write> gradient: array<f32>;
@group(3) @binding(3) var<storage, read_write> rhs: array<f32>;
@group(3) @binding(4) var<storage, read_write> dot_partials: array<vec4<f32>>;
// A batch of positions evaluated at once, one after another (see line_search.wgsl).
@group(3) @binding(5) var<storage, read_write> batch: array<f32>;
// Where the host's last step started (`start_step`), for `retreat`.
@group(3) @binding(6) var<storage, read_write> x_start: array<f32>;

// gradient = -rhs: the linearization's gradient again, bit for bit, after another pass has
// used its buffer (the state's potential, read with a step's last linearization).
@compute @workgroup_size(WORKGROUP)
fn gradient_from_rhs(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    if (index < 3u * params.vertex_count) {
        gradient[index] = -rhs[index];
    }
}

// direction = -gradient (steepest descent).
@compute @workgroup_size(WORKGROUP)
fn use_gradient(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    if (index < 3u * params.vertex_count) {
        direction[index] = -gradient[index];
    }
}

// x_saved = x.
@compute @workgroup_size(WORKGROUP)
fn save(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    if (index < 3u * params.vertex_count) {
        x_saved[index] = x[index];
    }
}

// x_saved = x_start = x: a step the host takes starts here (`offset` takes it).
@compute @workgroup_size(WORKGROUP)
fn start_step(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    if (index < 3u * params.vertex_count) {
        x_saved[index] = x[index];
        x_start[index] = x[index];
    }
}

// x = x_start + alpha (x - x_start): back toward where the host's last step started.
@compute @workgroup_size(WORKGROUP)
fn retreat(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    if (index < 3u * params.vertex_count) {
        x[index] = x_start[index] + params.alpha * (x[index] - x_start[index]);
    }
}

// x = x_saved + alpha direction (a line-search candidate). alpha = 0 is how the host puts the
// iterate back after candidates evaluated in place: a copy, since 0 times a non-finite entry
// of a failed solve's direction is NaN (the CPU twin evaluates candidates apart from x).
@compute @workgroup_size(WORKGROUP)
fn offset(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    if (index < 3u * params.vertex_count) {
        let saved = x_saved[index];
        x[index] = select(saved + params.alpha * direction[index], saved, params.alpha == 0.0);
    }
}

// x_saved = x and x = x_saved + alpha direction: `save` and `offset` in one pass (a step
// taken with its start kept).
@compute @workgroup_size(WORKGROUP)
fn advance(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    if (index < 3u * params.vertex_count) {
        let start = x[index];
        x_saved[index] = start;
        x[index] = start + params.alpha * direction[index];
    }
}

// Member j of the batch = x_saved + steps[j] direction: a line search's candidates, evaluated
// together.
@compute @workgroup_size(WORKGROUP)
fn batch_offsets(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let index = workgroup_slot(group, groups) * WORKGROUP + lid;
    let n = 3u * params.vertex_count;
    let j = index / n;
    if (j < params.count) {
        let i = index - j * n;
        batch[index] = x_saved[i] + params.steps[j / 4u][j % 4u] * direction[i];
    }
}

// direction *= alpha.
@compute @workgroup_size(WORKGROUP)
fn scale(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    if (index < 3u * params.vertex_count) {
        direction[index] *= params.alpha;
    }
}

// Per workgroup (g.d, d.d, g.g, 0), one vertex per invocation.
@compute @workgroup_size(WORKGROUP)
fn dots(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    var sums = vec4<f32>(0.0);
    let v = index;
    if (v < params.vertex_count) {
        let g = vec3<f32>(gradient[3u * v], gradient[3u * v + 1u], gradient[3u * v + 2u]);
        let d = vec3<f32>(direction[3u * v], direction[3u * v + 1u], direction[3u * v + 2u]);
        sums = vec4<f32>(dot(g, d), dot(d, d), dot(g, g), 0.0);
    }
    let total = workgroup_sum(lid, sums);
    if (lid == 0u && slot * WORKGROUP < params.vertex_count) {
        dot_partials[slot] = total;
    }
}
