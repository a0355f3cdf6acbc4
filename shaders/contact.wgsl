// Stage `contact`, the twin of src/contact/mod.rs on the device, one invocation per vertex:
// - `step_bound` (`contact::step_bound`): the barrier's collision-free bound, the largest t in
//   [0, 1] for which the straight path from x to x + t d closes at most `closable` of the
//   vertex's distance to every collider; per workgroup, the least of them;
// - `stop_at_contact` (`contact::stop_at_contact`): the projection model's trial positions,
//   each vertex's move from `x_saved` to `x` stopped where it first meets a collider;
// - `keep_pressed`: the direction's normal part removed at pressed vertices;
// - `contact_set` and `bound_outside` (`backend::projective::LocalContact`'s `grow_set` and
//   `bound_outside`): the local/global solver's contact set, grown at the iterate, with the
//   diagonal it gives, and the step's bound for the vertices outside it, at the nodes.

#import shared/reduce
#import shared/collider

struct Params {
    vertex_count: u32,
    collider_count: u32,
    closable: f32,
    // The local/global solver's nodes (theta per node) and `a k`, the stiffness a vertex in
    // the contact set adds to its diagonal.
    node_count: u32,
    theta_0: f32,
    theta_1: f32,
    contact_stiffness: f32,
}

@group(0) @binding(0) var<uniform> params: Params;

@group(1) @binding(0) var<storage, read> pinned: array<u32>;
@group(1) @binding(1) var<storage, read> colliders: array<Collider>;
// Rest positions: x is a displacement from them, in the axes of the vertex's part
// (shared/frame), as are the directions and normals here.
@group(1) @binding(2) var<storage, read> rest: array<f32>;
@group(1) @binding(3) var<storage, read> sdf_values: array<f32>;
@group(1) @binding(4) var<storage, read> frame_parts: array<u32>;

@group(2) @binding(0) var<storage, read_write> x: array<f32>;
@group(2) @binding(1) var<storage, read> x_start: array<f32>;
@group(2) @binding(2) var<storage, read> frame_offsets: array<vec4<f32>>;

@group(3) @binding(0) var<storage, read_write> direction: array<f32>;
@group(3) @binding(1) var<storage, read_write> bound_partials: array<f32>;
@group(3) @binding(2) var<storage, read> x_saved: array<f32>;
@group(3) @binding(3) var<storage, read> pressed: array<vec4<f32>>;
// The local/global solver's diagonal without contact, and with it.
@group(3) @binding(4) var<storage, read> projective_base: array<f32>;
@group(3) @binding(5) var<storage, read_write> projective_diagonal: array<f32>;
// Per vertex: IN_SET, STOPPED (by the last step's bound).
@group(3) @binding(6) var<storage, read_write> contact_flags: array<u32>;

const IN_SET: u32 = 1u;
const STOPPED: u32 = 2u;

// Rounds per vertex and collider before the bound settles for what it has cleared.
const BOUND_ROUNDS: u32 = 64u;
// A sampled grid's distance may change up to twice as fast as the point moves.
const SDF_LIPSCHITZ: f32 = 2.0;
// Slopes this small, relative to |d|, are a tangent's round-off (f32's, where the CPU twin
// takes f64's 1e-9).
const TANGENT_ROUNDOFF: f32 = 1e-6;

fn vector3(buffer_index: u32, v: u32) -> vec3<f32> {
    if (buffer_index == 0u) {
        return vec3<f32>(x[3u * v], x[3u * v + 1u], x[3u * v + 2u]);
    }
    if (buffer_index == 1u) {
        return vec3<f32>(direction[3u * v], direction[3u * v + 1u], direction[3u * v + 2u]);
    }
    if (buffer_index == 2u) {
        return vec3<f32>(rest[3u * v], rest[3u * v + 1u], rest[3u * v + 2u]);
    }
    return vec3<f32>(x_saved[3u * v], x_saved[3u * v + 1u], x_saved[3u * v + 2u]);
}

// The bound for one vertex at `at` moving by `d` (in the axes of its part's frame `f`) and one
// collider, no further than `limit`:
// Newton's method on phi(at + t d) = keep from t = 0 for the convex analytic shapes (it stays
// short of the first crossing), conservative advancement for grids.
fn path_bound(c: Collider, f: PartFrame, at: vec3<f32>, d: vec3<f32>, limit: f32) -> f32 {
    let phi = distance_in(c, f, at).phi;
    if (phi <= 0.0 && params.closable < 1.0) {
        return 0.0;
    }
    let keep = (1.0 - params.closable) * max(phi, 0.0);
    let size = length(d);
    let level = -TANGENT_ROUNDOFF * size;
    var t = 0.0;
    for (var round = 0u; round < BOUND_ROUNDS; round++) {
        let here = distance_in(c, f, at + d * t);
        let slope = dot(here.normal, d);
        let gap = here.phi - keep;
        if (gap <= 0.0) {
            return select(t, limit, t == 0.0 && slope >= level);
        }
        var advance = gap / (SDF_LIPSCHITZ * size);
        if (c.kind != GRID) {
            if (slope >= level) {
                return limit;
            }
            advance = gap / -slope;
        }
        if (t + advance >= limit) {
            return limit;
        }
        t += advance;
    }
    return t;
}

fn vertex_bound(v: u32) -> f32 {
    let d = vector3(1u, v);
    if (pinned[v] != 0u || all(d == vec3<f32>(0.0))) {
        return 1.0;
    }
    let at = vector3(2u, v) + vector3(0u, v);
    let frame = part_frame(v);
    var bound = 1.0;
    for (var c = 0u; c < params.collider_count && bound > 0.0; c++) {
        bound = min(bound, path_bound(part_collider(frame, c), frame, at, d, bound));
    }
    return bound;
}

@compute @workgroup_size(WORKGROUP)
fn step_bound(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    var bound = 1.0;
    if (index < params.vertex_count) {
        bound = vertex_bound(index);
    }
    let least = workgroup_min(lid, bound);
    if (lid == 0u && slot * WORKGROUP < params.vertex_count) {
        bound_partials[slot] = least;
    }
}

// The move from x_saved to x of a free vertex: one resting on a collider slides along it
// (loses the part into it); the move stops where the straight path first meets a collider
// (`closable` is 1 here); a point that rounding left inside goes back out along the normal.
@compute @workgroup_size(WORKGROUP)
fn stop_at_contact(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let v = workgroup_slot(group, groups) * WORKGROUP + lid;
    if (v >= params.vertex_count || pinned[v] != 0u) {
        return;
    }
    let rest_position = vector3(2u, v);
    let origin = rest_position + vector3(3u, v);
    var d = vector3(0u, v) - vector3(3u, v);
    if (all(d == vec3<f32>(0.0))) {
        return;
    }
    let frame = part_frame(v);
    let resting = resting_normal(frame, origin);
    if (resting.w > 0.0) {
        // Twice: in a turned part's axes the normal has three components, and one removal
        // leaves f32's rounding of what it removed, which can exceed the path's tangent
        // round-off (relative to what is left); the second leaves the rounding of that.
        d -= resting.xyz * min(dot(d, resting.xyz), 0.0);
        d -= resting.xyz * min(dot(d, resting.xyz), 0.0);
    }
    var t = 1.0;
    for (var c = 0u; c < params.collider_count; c++) {
        t = min(t, path_bound(part_collider(frame, c), frame, origin, d, t));
    }
    var stop = origin + d * t;
    for (var c = 0u; c < params.collider_count; c++) {
        let at = distance_in(part_collider(frame, c), frame, stop);
        if (at.phi < 0.0) {
            stop -= at.normal * at.phi;
        }
    }
    let moved = stop - rest_position;
    for (var c = 0u; c < 3u; c++) {
        x[3u * v + c] = moved[c];
    }
}

// d -= n (n . d) at every pressed vertex.
@compute @workgroup_size(WORKGROUP)
fn keep_pressed(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let v = workgroup_slot(group, groups) * WORKGROUP + lid;
    if (v >= params.vertex_count) {
        return;
    }
    let press = pressed[v];
    if (press.w > 0.0) {
        let d = vector3(1u, v);
        let kept = d - press.xyz * dot(d, press.xyz);
        for (var c = 0u; c < 3u; c++) {
            direction[3u * v + c] = kept[c];
        }
    }
}

fn node_theta(q: u32) -> f32 {
    return select(params.theta_0, params.theta_1, q == 1u);
}

// Where node q puts vertex v (rest + displacement): theta x + (1 - theta) x_start.
fn at_node(v: u32, q: u32) -> vec3<f32> {
    let theta = node_theta(q);
    let start = vec3<f32>(x_start[3u * v], x_start[3u * v + 1u], x_start[3u * v + 2u]);
    return vector3(2u, v) + vector3(0u, v) * theta + start * (1.0 - theta);
}

// The contact set at the iterate: a free vertex already in it, inside a collider at a node, or
// stopped at one by the last step; its diagonal gains `a k`.
@compute @workgroup_size(WORKGROUP)
fn contact_set(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let v = workgroup_slot(group, groups) * WORKGROUP + lid;
    if (v >= params.vertex_count) {
        return;
    }
    var member = contact_flags[v] != 0u;
    let frame = part_frame(v);
    for (var q = 0u; q < params.node_count && !member; q++) {
        let at = at_node(v, q);
        for (var c = 0u; c < params.collider_count && !member; c++) {
            member = distance_in(part_collider(frame, c), frame, at).phi <= 0.0;
        }
    }
    member = member && pinned[v] == 0u;
    contact_flags[v] = select(0u, IN_SET, member);
    projective_diagonal[v] = projective_base[v] + select(0.0, params.contact_stiffness, member);
}

// The largest t in [0, 1] for which no free vertex outside the contact set enters a collider at
// a node on its way from x to x + t d (per workgroup, the least); the vertices whose paths
// would enter before the full step are marked STOPPED.
@compute @workgroup_size(WORKGROUP)
fn bound_outside(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let v = slot * WORKGROUP + lid;
    var own = 1.0;
    if (v < params.vertex_count && pinned[v] == 0u && contact_flags[v] == 0u) {
        let d = vector3(1u, v);
        if (any(d != vec3<f32>(0.0))) {
            let frame = part_frame(v);
            for (var q = 0u; q < params.node_count; q++) {
                let at = at_node(v, q);
                for (var c = 0u; c < params.collider_count; c++) {
                    own = min(own, path_bound(part_collider(frame, c), frame, at, d * node_theta(q), own));
                }
            }
        }
        if (own < 1.0) {
            contact_flags[v] = STOPPED;
        }
    }
    let least = workgroup_min(lid, own);
    if (lid == 0u && slot * WORKGROUP < params.vertex_count) {
        bound_partials[slot] = least;
    }
}
