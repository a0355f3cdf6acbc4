// What every per-tet stage (element, local) reads: its parameters — a run of elements, where
// its energy partials go, the quadrature nodes — the tets' corners, rest data and materials,
// and the positions; and how it writes a corner gradient and its energy partials (into the
// stage's `corner_gradients` and `energy_partials`, in the slots of shared/slots.wgsl).

#import shared/reduce
#import shared/slots

struct Params {
    tet_count: u32,
    spring_count: u32,
    node_count: u32,
    // The run of elements this dispatch covers, and where its energy partials go.
    first: u32,
    count: u32,
    partial_base: u32,
    // Quadrature nodes (c_q, theta_q); the second is unused when node_count is 1.
    weight_0: f32,
    theta_0: f32,
    weight_1: f32,
    theta_1: f32,
    // A step length (the mixed stage's merit and advance).
    alpha: f32,
    // A batch of energy passes (`members` > 1, the element stage's): the run's workgroups
    // repeat once per member; member j reads its displacements from j * vertex_count on in
    // `x` and writes its energy partials from j * partial_count on.
    vertex_count: u32,
    partial_count: u32,
    members: u32,
    // 1: the local stage's closest rotations take one Newton step (a local/global local step
    // between a solve's first and last: LocalGlobalRequest::rotation_search); 0: they converge.
    one_rotation_step: u32,
}

@group(0) @binding(0) var<uniform> params: Params;

@group(1) @binding(0) var<storage, read> tets: array<vec4<u32>>;
// Per tet: (grad_0, volume), (grad_1, 0), (grad_2, 0), (grad_3, 0).
@group(1) @binding(1) var<storage, read> tet_rest: array<vec4<f32>>;
// Per tet: (model, mu, lambda, 0).
@group(1) @binding(2) var<storage, read> tet_material: array<vec4<f32>>;

@group(2) @binding(0) var<storage, read> x: array<f32>;
@group(2) @binding(1) var<storage, read> x_start: array<f32>;

// The batch member this workgroup evaluates (0 outside a batch).
var<private> member: u32 = 0u;

// The workgroup's slot within its member's run, setting `member`: a batch repeats the run's
// workgroups once per member.
fn run_slot(group: vec3<u32>, groups: vec3<u32>) -> u32 {
    let place = batch_place(group, groups, params.count);
    member = place.x;
    return place.y;
}

// Whether the workgroup's member is one of the batch's (a two-dimensional dispatch's last row
// runs past them).
fn in_batch() -> bool {
    return member < max(params.members, 1u);
}

fn node(q: u32) -> vec2<f32> {
    if (q == 0u) {
        return vec2<f32>(params.weight_0, params.theta_0);
    }
    return vec2<f32>(params.weight_1, params.theta_1);
}

// Displacements from the rest shape (the GPU stores positions so; see gpu/buffers.rs), at
// theta x + (1 - theta) x_start. At theta 1 (backward Euler's node, and a state's own
// potential) the start weighs nothing, and its loads, half a tet's gathers, are skipped.
fn point(v: u32, theta: f32) -> vec3<f32> {
    let at = 3u * (member * params.vertex_count + v);
    let p = vec3<f32>(x[at], x[at + 1u], x[at + 2u]);
    if (theta == 1.0) {
        return p;
    }
    let s = vec3<f32>(x_start[3u * v], x_start[3u * v + 1u], x_start[3u * v + 2u]);
    return p * theta + s * (1.0 - theta);
}

// The tet's shape gradients and corners.
struct Tet {
    v: vec4<u32>,
    b0: vec3<f32>,
    b1: vec3<f32>,
    b2: vec3<f32>,
    b3: vec3<f32>,
    volume: f32,
}

fn load_tet(e: u32) -> Tet {
    let r0 = tet_rest[4u * e];
    return Tet(tets[e], r0.xyz, tet_rest[4u * e + 1u].xyz, tet_rest[4u * e + 2u].xyz, tet_rest[4u * e + 3u].xyz, r0.w);
}

// The displacement gradient H = F - I = sum_a u_a beta_a^T at theta (the rest positions'
// sum is I): column j is sum_a u_a beta_a[j].
fn displacement_gradient(t: Tet, theta: f32) -> mat3x3<f32> {
    let z0 = point(t.v.x, theta);
    let z1 = point(t.v.y, theta);
    let z2 = point(t.v.z, theta);
    let z3 = point(t.v.w, theta);
    return mat3x3<f32>(
        z0 * t.b0.x + z1 * t.b1.x + z2 * t.b2.x + z3 * t.b3.x,
        z0 * t.b0.y + z1 * t.b1.y + z2 * t.b2.y + z3 * t.b3.y,
        z0 * t.b0.z + z1 * t.b1.z + z2 * t.b2.z + z3 * t.b3.z,
    );
}

fn store_corner(e: u32, a: u32, g: vec3<f32>) {
    corner_gradients[tet_corner(e, a, params.tet_count)] = vec4<f32>(g, 0.0);
}

// Sums `value` over the workgroup into its energy partial.
fn reduce(lid: u32, slot: u32, value: f32) {
    let total = workgroup_sum(lid, vec4<f32>(value, 0.0, 0.0, 0.0));
    if (lid == 0u && slot * WORKGROUP < params.count && in_batch()) {
        energy_partials[member * params.partial_count + params.partial_base + slot] = total.x;
    }
}
