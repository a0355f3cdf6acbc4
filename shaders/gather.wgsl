// Stage `gather`: the per-vertex part of the step objective (inertia and gravity; collider
// penalties, handles and lagged damping stay on the CPU for now) and the gather of element
// corner gradients into vertex gradients. The twin of src/backend/cpu/gather.rs.
// Per workgroup it writes, in fixed tree order, the partial sums
// (vertex energy, |grad|^2, force scale, noise magnitude).

#import shared/reduce

struct Params {
    vertex_count: u32,
    node_count: u32,
    inv_h2: f32,
    // sum_q c_q theta_q: the weight of gravity in the gradient.
    gravity_weight: f32,
    gravity_x: f32,
    gravity_y: f32,
    gravity_z: f32,
    weight_0: f32,
    theta_0: f32,
    weight_1: f32,
    theta_1: f32,
}

@group(0) @binding(0) var<uniform> params: Params;

@group(1) @binding(0) var<storage, read> masses: array<f32>;
@group(1) @binding(1) var<storage, read> pinned: array<u32>;
@group(1) @binding(2) var<storage, read> corner_offsets: array<u32>;
@group(1) @binding(3) var<storage, read> corners: array<u32>;

@group(2) @binding(0) var<storage, read> x: array<f32>;
@group(2) @binding(1) var<storage, read> x_start: array<f32>;
@group(2) @binding(2) var<storage, read> target_positions: array<f32>;

@group(3) @binding(0) var<storage, read> corner_gradients: array<f32>;
@group(3) @binding(1) var<storage, read_write> gradient: array<f32>;
@group(3) @binding(2) var<storage, read_write> vertex_blocks: array<f32>;
@group(3) @binding(3) var<storage, read_write> partials: array<vec4<f32>>;

fn load(buffer_index: u32, v: u32) -> vec3<f32> {
    if (buffer_index == 0u) {
        return vec3<f32>(x[3u * v], x[3u * v + 1u], x[3u * v + 2u]);
    }
    if (buffer_index == 1u) {
        return vec3<f32>(x_start[3u * v], x_start[3u * v + 1u], x_start[3u * v + 2u]);
    }
    return vec3<f32>(target_positions[3u * v], target_positions[3u * v + 1u], target_positions[3u * v + 2u]);
}

fn node(q: u32) -> vec2<f32> {
    if (q == 0u) {
        return vec2<f32>(params.weight_0, params.theta_0);
    }
    return vec2<f32>(params.weight_1, params.theta_1);
}

// (energy, |g|^2, force scale, noise magnitude) of vertex v; writes its gradient and block.
fn vertex(v: u32) -> vec4<f32> {
    let m = masses[v];
    let g = vec3<f32>(params.gravity_x, params.gravity_y, params.gravity_z);
    let xv = load(0u, v);
    let start = load(1u, v);
    var energy = 0.0;
    for (var q = 0u; q < params.node_count; q++) {
        let cw = node(q);
        energy -= cw.x * m * dot(g, xv * cw.y + start * (1.0 - cw.y));
    }
    if (pinned[v] != 0u) {
        for (var c = 0u; c < 3u; c++) {
            gradient[3u * v + c] = 0.0;
        }
        for (var k = 0u; k < 9u; k++) {
            vertex_blocks[9u * v + k] = select(0.0, 1.0, k % 4u == 0u);
        }
        return vec4<f32>(energy, 0.0, 0.0, 0.0);
    }
    let mass = m * params.inv_h2;
    let inertia = (xv - load(2u, v)) * mass;
    energy += 0.5 * dot(inertia, xv - load(2u, v));
    let weight = g * (m * params.gravity_weight);
    var acc = inertia - weight;
    var forces = length(inertia) + length(weight);
    for (var i = corner_offsets[v]; i < corner_offsets[v + 1u]; i++) {
        let slot = 3u * corners[i];
        let f = vec3<f32>(corner_gradients[slot], corner_gradients[slot + 1u], corner_gradients[slot + 2u]);
        acc += f;
        forces += length(f);
    }
    for (var c = 0u; c < 3u; c++) {
        gradient[3u * v + c] = acc[c];
    }
    for (var k = 0u; k < 9u; k++) {
        vertex_blocks[9u * v + k] = select(0.0, mass, k % 4u == 0u);
    }
    let extent = max(abs(xv.x), max(abs(xv.y), abs(xv.z)));
    return vec4<f32>(energy, dot(acc, acc), forces, forces * extent);
}

@compute @workgroup_size(64)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    var sums = vec4<f32>(0.0);
    if (gid.x < params.vertex_count) {
        sums = vertex(gid.x);
    }
    let total = workgroup_sum(lid, sums);
    if (lid == 0u) {
        partials[wid.x] = total;
    }
}
