// Stage `pcg`: Jacobi-preconditioned conjugate gradients entirely on the GPU, with the
// Hessian either assembled (block-sparse rows) or applied matrix-free from the element blocks
// (each vertex gathers its rows of the element Hessians through its corners). The twin of src/backend/cpu/pcg.rs: start from zero, stop at
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
    // 1: apply the element blocks, vertex blocks and damping matrix instead of `blocks`.
    matrix_free: u32,
    // Matrix-free only: add the lagged damping matrix.
    damped: u32,
    tet_count: u32,
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
@group(1) @binding(3) var<storage, read> pinned: array<u32>;
@group(1) @binding(4) var<storage, read> corner_offsets: array<u32>;
@group(1) @binding(5) var<storage, read> corners: array<u32>;
// The vertex of each element corner slot.
@group(1) @binding(6) var<storage, read> corner_vertices: array<u32>;

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
@group(3) @binding(10) var<storage, read> element_blocks: array<f32>;
@group(3) @binding(11) var<storage, read> vertex_blocks: array<f32>;
@group(3) @binding(12) var<storage, read> damping_blocks: array<f32>;

fn vector_at(buffer: u32, v: u32) -> vec3<f32> {
    switch buffer {
        case 0u: { return vec3<f32>(b[3u * v], b[3u * v + 1u], b[3u * v + 2u]); }
        case 1u: { return vec3<f32>(r[3u * v], r[3u * v + 1u], r[3u * v + 2u]); }
        case 2u: { return vec3<f32>(z[3u * v], z[3u * v + 1u], z[3u * v + 2u]); }
        case 3u: { return vec3<f32>(p[3u * v], p[3u * v + 1u], p[3u * v + 2u]); }
        default: { return vec3<f32>(ap[3u * v], ap[3u * v + 1u], ap[3u * v + 2u]); }
    }
}

// Row-major 3x3 block `k` of `buffer` (0 assembled, 1 element, 2 vertex, 3 damping) times u,
// or its transpose times u.
fn block_times(buffer: u32, k: u32, u: vec3<f32>, transposed: bool) -> vec3<f32> {
    var m: array<f32, 9>;
    for (var i = 0u; i < 9u; i++) {
        switch buffer {
            case 0u: { m[i] = blocks[9u * k + i]; }
            case 1u: { m[i] = element_blocks[9u * k + i]; }
            case 2u: { m[i] = vertex_blocks[9u * k + i]; }
            default: { m[i] = damping_blocks[9u * k + i]; }
        }
    }
    if (transposed) {
        return vec3<f32>(
            m[0] * u.x + m[3] * u.y + m[6] * u.z,
            m[1] * u.x + m[4] * u.y + m[7] * u.z,
            m[2] * u.x + m[5] * u.y + m[8] * u.z,
        );
    }
    return vec3<f32>(
        m[0] * u.x + m[1] * u.y + m[2] * u.z,
        m[3] * u.x + m[4] * u.y + m[5] * u.z,
        m[6] * u.x + m[7] * u.y + m[8] * u.z,
    );
}

// Index of block (a, b), a <= b, among the upper blocks of an element of n corners.
fn upper_block(a: u32, b: u32, n: u32) -> u32 {
    return a * n - a * (a + 1u) / 2u + b;
}

// The element a corner slot belongs to: (first corner slot, corner, arity, first block).
fn corner_element(slot: u32) -> vec4<u32> {
    let tet_slots = 4u * params.tet_count;
    if (slot < tet_slots) {
        return vec4<u32>(slot & ~3u, slot & 3u, 4u, 10u * (slot / 4u));
    }
    let s = (slot - tet_slots) / 2u;
    return vec4<u32>(tet_slots + 2u * s, (slot - tet_slots) & 1u, 2u, 10u * params.tet_count + 3u * s);
}

// Row v of the Hessian times the vector `which` (see vector_at).
fn hessian_row(v: u32, which: u32) -> vec3<f32> {
    var acc = vec3<f32>(0.0);
    if (params.matrix_free == 0u) {
        for (var index = row_offsets[v]; index < row_offsets[v + 1u]; index++) {
            acc += block_times(0u, index, vector_at(which, columns[index]), false);
        }
        return acc;
    }
    // As assembled: pinned vertices keep only their vertex block, and no free row couples to
    // a pinned column.
    acc = block_times(2u, v, vector_at(which, v), false);
    if (pinned[v] != 0u) {
        return acc;
    }
    for (var i = corner_offsets[v]; i < corner_offsets[v + 1u]; i++) {
        let element = corner_element(corners[i]);
        let a = element.y;
        for (var b = 0u; b < element.z; b++) {
            let u = corner_vertices[element.x + b];
            if (pinned[u] == 0u) {
                let k = element.w + upper_block(min(a, b), max(a, b), element.z);
                acc += block_times(1u, k, vector_at(which, u), a > b);
            }
        }
    }
    if (params.damped != 0u) {
        for (var index = row_offsets[v]; index < row_offsets[v + 1u]; index++) {
            acc += block_times(3u, index, vector_at(which, columns[index]), false);
        }
    }
    return acc;
}

// Component c of the Hessian's diagonal at vertex v.
fn hessian_diagonal(v: u32, c: u32) -> f32 {
    if (params.matrix_free == 0u) {
        return blocks[9u * diagonal[v] + 4u * c];
    }
    var sum = vertex_blocks[9u * v + 4u * c];
    if (pinned[v] != 0u) {
        return sum;
    }
    for (var i = corner_offsets[v]; i < corner_offsets[v + 1u]; i++) {
        let element = corner_element(corners[i]);
        let k = element.w + upper_block(element.y, element.y, element.z);
        sum += element_blocks[9u * k + 4u * c];
    }
    if (params.damped != 0u) {
        sum += damping_blocks[9u * diagonal[v] + 4u * c];
    }
    return sum;
}

// Writes a workgroup's sum of `value` to partials[slot].
fn reduce_group(lid: u32, slot: u32, value: vec2<f32>) {
    let total = workgroup_sum(lid, vec4<f32>(value, 0.0, 0.0));
    if (lid == 0u && slot * WORKGROUP < params.vertex_count) {
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
fn setup(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    var sums = vec2<f32>(0.0);
    let v = index;
    if (v < params.vertex_count) {
        let bv = vector_at(0u, v);
        for (var c = 0u; c < 3u; c++) {
            // An indefinite diagonal cannot precondition CG; its magnitude still scales well.
            let a = hessian_diagonal(v, c);
            let inv = select(1.0, 1.0 / abs(a), a != 0.0);
            inverse_diagonal[3u * v + c] = inv;
            x[3u * v + c] = 0.0;
            r[3u * v + c] = bv[c];
            z[3u * v + c] = inv * bv[c];
            p[3u * v + c] = inv * bv[c];
        }
        sums = vec2<f32>(dot(bv, bv), dot(bv, vector_at(2u, v)));
    }
    reduce_group(lid, slot, sums);
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
fn product(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    let running = scalars.state == RUNNING;
    var sums = vec2<f32>(0.0);
    let v = index;
    if (running && v < params.vertex_count) {
        let acc = hessian_row(v, 3u);
        for (var c = 0u; c < 3u; c++) {
            ap[3u * v + c] = acc[c];
        }
        sums = vec2<f32>(dot(vector_at(3u, v), acc), 0.0);
    }
    reduce_group(lid, slot, sums);
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
fn update(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    let running = scalars.state == RUNNING;
    let alpha = scalars.alpha;
    var sums = vec2<f32>(0.0);
    let v = index;
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
    reduce_group(lid, slot, sums);
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
fn direction(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    let v = index;
    if (scalars.state != RUNNING || v >= params.vertex_count) {
        return;
    }
    let beta = scalars.beta;
    for (var c = 0u; c < 3u; c++) {
        let i = 3u * v + c;
        p[i] = z[i] + beta * p[i];
    }
}
