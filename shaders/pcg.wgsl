// Stage `pcg`: Jacobi-preconditioned conjugate gradients on the assembled block-sparse
// matrix, entirely on the GPU. The twin of src/backend/cpu/pcg.rs: start from zero, stop at
// |r| <= tol |b|, and stop on non-positive curvature (returning the last iterate, or b on the
// first iteration; the host copies b for that case). Scalars live in `scalars`; per-vertex
// kernels write per-workgroup partial sums and single-workgroup kernels add them in a fixed
// order, so the solve gives the same bits every run. The host reads `scalars` only every
// few iterations.

#import shared/reduce

struct Params {
    vertex_count: u32,
    partial_count: u32,
    max_iterations: u32,
    tolerance: f32,
}

struct Scalars {
    rz: f32,
    alpha: f32,
    beta: f32,
    residual_squared: f32,
    threshold_squared: f32,
    b_norm_squared: f32,
    iterations: u32,
    // 0 running, 1 converged, 2 negative curvature at once, 3 negative curvature later,
    // 4 iteration limit.
    state: u32,
}

const RUNNING: u32 = 0u;
const CONVERGED: u32 = 1u;
const NEGATIVE_FIRST: u32 = 2u;
const NEGATIVE_LATER: u32 = 3u;
const LIMIT: u32 = 4u;

@group(0) @binding(0) var<uniform> params: Params;

@group(1) @binding(0) var<storage, read> row_offsets: array<u32>;
@group(1) @binding(1) var<storage, read> columns: array<u32>;
@group(1) @binding(2) var<storage, read> diagonal: array<u32>;

@group(3) @binding(0) var<storage, read> blocks: array<f32>;
@group(3) @binding(1) var<storage, read> b: array<f32>;
@group(3) @binding(2) var<storage, read_write> x: array<f32>;
@group(3) @binding(3) var<storage, read_write> r: array<f32>;
@group(3) @binding(4) var<storage, read_write> z: array<f32>;
@group(3) @binding(5) var<storage, read_write> p: array<f32>;
@group(3) @binding(6) var<storage, read_write> ap: array<f32>;
@group(3) @binding(7) var<storage, read_write> inverse_diagonal: array<f32>;
@group(3) @binding(8) var<storage, read_write> partials: array<vec2<f32>>;
@group(3) @binding(9) var<storage, read_write> scalars: Scalars;

fn vector_at(buffer: u32, v: u32) -> vec3<f32> {
    switch buffer {
        case 0u: { return vec3<f32>(b[3u * v], b[3u * v + 1u], b[3u * v + 2u]); }
        case 1u: { return vec3<f32>(r[3u * v], r[3u * v + 1u], r[3u * v + 2u]); }
        case 2u: { return vec3<f32>(z[3u * v], z[3u * v + 1u], z[3u * v + 2u]); }
        case 3u: { return vec3<f32>(p[3u * v], p[3u * v + 1u], p[3u * v + 2u]); }
        default: { return vec3<f32>(ap[3u * v], ap[3u * v + 1u], ap[3u * v + 2u]); }
    }
}

// Writes a workgroup's sum of `value` to partials[slot].
fn reduce_group(lid: u32, slot: u32, value: vec2<f32>) {
    let total = workgroup_sum(lid, vec4<f32>(value, 0.0, 0.0));
    if (lid == 0u) {
        partials[slot] = total.xy;
    }
}

// The sum of all partials, in a fixed order (strided per invocation, then the tree).
fn reduce_all(lid: u32) -> vec2<f32> {
    var sum = vec2<f32>(0.0);
    for (var i = lid; i < params.partial_count; i += WORKGROUP) {
        sum += partials[i];
    }
    return workgroup_sum(lid, vec4<f32>(sum, 0.0, 0.0)).xy;
}

// x = 0, r = b, z = P b, p = z; partials (r.r, r.z).
@compute @workgroup_size(64)
fn setup(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    var sums = vec2<f32>(0.0);
    let v = gid.x;
    if (v < params.vertex_count) {
        let d = 9u * diagonal[v];
        let bv = vector_at(0u, v);
        for (var c = 0u; c < 3u; c++) {
            // An indefinite diagonal cannot precondition CG; its magnitude still scales well.
            let a = blocks[d + 4u * c];
            let inv = select(1.0, 1.0 / abs(a), a != 0.0);
            inverse_diagonal[3u * v + c] = inv;
            x[3u * v + c] = 0.0;
            r[3u * v + c] = bv[c];
            z[3u * v + c] = inv * bv[c];
            p[3u * v + c] = inv * bv[c];
        }
        sums = vec2<f32>(dot(bv, bv), dot(bv, vector_at(2u, v)));
    }
    reduce_group(lid, wid.x, sums);
}

@compute @workgroup_size(64)
fn reduce_setup(@builtin(local_invocation_index) lid: u32) {
    let sums = reduce_all(lid);
    if (lid == 0u) {
        scalars.b_norm_squared = sums.x;
        scalars.residual_squared = sums.x;
        scalars.rz = sums.y;
        scalars.threshold_squared = params.tolerance * params.tolerance * sums.x;
        scalars.iterations = 0u;
        scalars.state = select(RUNNING, CONVERGED, sums.x == 0.0);
    }
}

// ap = A p; partials (p.ap, 0).
@compute @workgroup_size(64)
fn product(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let running = scalars.state == RUNNING;
    var sums = vec2<f32>(0.0);
    let v = gid.x;
    if (running && v < params.vertex_count) {
        var acc = vec3<f32>(0.0);
        for (var index = row_offsets[v]; index < row_offsets[v + 1u]; index++) {
            let pc = vector_at(3u, columns[index]);
            let k = 9u * index;
            acc += vec3<f32>(
                blocks[k] * pc.x + blocks[k + 1u] * pc.y + blocks[k + 2u] * pc.z,
                blocks[k + 3u] * pc.x + blocks[k + 4u] * pc.y + blocks[k + 5u] * pc.z,
                blocks[k + 6u] * pc.x + blocks[k + 7u] * pc.y + blocks[k + 8u] * pc.z,
            );
        }
        for (var c = 0u; c < 3u; c++) {
            ap[3u * v + c] = acc[c];
        }
        sums = vec2<f32>(dot(vector_at(3u, v), acc), 0.0);
    }
    reduce_group(lid, wid.x, sums);
}

@compute @workgroup_size(64)
fn reduce_curvature(@builtin(local_invocation_index) lid: u32) {
    let running = scalars.state == RUNNING;
    let sums = reduce_all(lid);
    if (lid == 0u && running) {
        let curvature = sums.x;
        if (curvature > 0.0) {
            scalars.alpha = scalars.rz / curvature;
        } else {
            scalars.state = select(NEGATIVE_LATER, NEGATIVE_FIRST, scalars.iterations == 0u);
            scalars.iterations += 1u;
        }
    }
}

// x += alpha p, r -= alpha ap, z = P r; partials (r.r, r.z).
@compute @workgroup_size(64)
fn update(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let running = scalars.state == RUNNING;
    let alpha = scalars.alpha;
    var sums = vec2<f32>(0.0);
    let v = gid.x;
    if (running && v < params.vertex_count) {
        for (var c = 0u; c < 3u; c++) {
            let i = 3u * v + c;
            x[i] += alpha * p[i];
            r[i] -= alpha * ap[i];
            z[i] = inverse_diagonal[i] * r[i];
        }
        let rv = vector_at(1u, v);
        sums = vec2<f32>(dot(rv, rv), dot(rv, vector_at(2u, v)));
    }
    reduce_group(lid, wid.x, sums);
}

@compute @workgroup_size(64)
fn reduce_residual(@builtin(local_invocation_index) lid: u32) {
    let running = scalars.state == RUNNING;
    let sums = reduce_all(lid);
    if (lid == 0u && running) {
        scalars.iterations += 1u;
        scalars.residual_squared = sums.x;
        if (sums.x <= scalars.threshold_squared) {
            scalars.state = CONVERGED;
        } else if (scalars.iterations >= params.max_iterations) {
            scalars.state = LIMIT;
        } else {
            scalars.beta = sums.y / scalars.rz;
            scalars.rz = sums.y;
        }
    }
}

// p = z + beta p.
@compute @workgroup_size(64)
fn direction(@builtin(global_invocation_id) gid: vec3<u32>) {
    let v = gid.x;
    if (scalars.state != RUNNING || v >= params.vertex_count) {
        return;
    }
    let beta = scalars.beta;
    for (var c = 0u; c < 3u; c++) {
        let i = 3u * v + c;
        p[i] = z[i] + beta * p[i];
    }
}
