// Stage `gather`: everything that lives on one vertex — inertia, gravity, collider contact
// (penalty, cubic penalty or barrier, and the projection model's pressed vertices), handle
// springs, the lagged damping and self-contact's records (shared/couplings) — and the gather
// of element corner gradients into vertex gradients. The twin of src/backend/cpu/gather.rs. One invocation per vertex; per
// workgroup it writes, in fixed tree order, the partial sums
// (vertex energy, |grad|^2, force scale, squared noise floor).
//
// The lagged damping (Rayleigh, ether drag, friction) is one block-sparse matrix D on the
// Hessian's pattern, built at the start of the step, and per-vertex linear terms (b, c) of the
// friction against moving colliders: the vertex adds its row of 1/2 dx^T D dx - b . dx + c,
// dx = x - x_n, and of its gradient D dx - b.

#import shared/reduce
#import shared/collider
#import shared/slots
#import shared/matrix
#import shared/coupling_product

struct Params {
    vertex_count: u32,
    node_count: u32,
    inv_h2: f32,
    // sum_q c_q theta_q: the weight of a force at the nodes in the gradient, and of the
    // barrier, which acts at the end positions x (`end_contact_weight` in the CPU twin).
    end_weight: f32,
    gravity_x: f32,
    gravity_y: f32,
    gravity_z: f32,
    weight_0: f32,
    theta_0: f32,
    weight_1: f32,
    theta_1: f32,
    collider_count: u32,
    // The penalty's stiffness (0: no penalty), and 1 for the cubic one.
    contact_stiffness: f32,
    cubic: u32,
    // 1: keep the colliders' curvature term (exact Hessian); 0: drop it (projected).
    exact_hessian: u32,
    // The lagged damping: 0 none; 1 (DAMPED_VERTICES) its vertex blocks, from their factors,
    // its linear terms and couplings; 2 (DAMPED_RAYLEIGH) those and Rayleigh's matrix.
    damped: u32,
    // 1: gather the gradient and write it and the vertex blocks; 0: the sums alone (a
    // line-search candidate must not overwrite the linearization's gradient).
    derivatives: u32,
    // A linearization's gather, which also writes Newton's right-hand side -grad G (1), and
    // its vertex terms' part (2, RHS_AND_VERTEX_TERMS).
    rhs: u32,
    tet_count: u32,
    spring_count: u32,
    // The barrier's activation distance and stiffness (stiffness 0: no barrier).
    barrier_distance: f32,
    barrier_stiffness: f32,
    // 1: the projection model (`press_against_colliders` in the CPU twin).
    projection: u32,
    // Self-contact's boundary vertex count (0: no self-contact; with no nodes it has no
    // part), the record set the last detection wrote, and 1 where the step's friction
    // records (set 2) are part of the damping.
    surface_count: u32,
    contact_set: u32,
    friction: u32,
    // An energy-only gather of a batch of positions (`members` > 1): the workgroups repeat
    // once per member; member j reads its displacements from j * vertex_count on in `x` and
    // writes its partials from j * (the workgroups of one) on.
    members: u32,
}

@group(0) @binding(0) var<uniform> params: Params;

@group(1) @binding(0) var<storage, read> masses: array<f32>;
@group(1) @binding(1) var<storage, read> pinned: array<u32>;
@group(1) @binding(2) var<storage, read> corner_offsets: array<u32>;
@group(1) @binding(3) var<storage, read> corners: array<u32>;
@group(1) @binding(4) var<storage, read> colliders: array<Collider>;
@group(1) @binding(5) var<storage, read> row_offsets: array<u32>;
// Rest positions: x, x_start and the target are displacements from them, in the axes of the
// vertex's part (shared/frame).
@group(1) @binding(6) var<storage, read> rest: array<f32>;
@group(1) @binding(7) var<storage, read> row_slices: array<u32>;
@group(1) @binding(8) var<storage, read> slot_columns: array<u32>;
// The samples of every signed-distance-grid collider (shared/collider).
@group(1) @binding(9) var<storage, read> sdf_values: array<f32>;
// Per vertex, its index among self-contact's boundary vertices (NO_VERTEX for none).
@group(1) @binding(10) var<storage, read> surface_index: array<u32>;
// Per vertex, its part (shared/frame).
@group(1) @binding(11) var<storage, read> frame_parts: array<u32>;

@group(2) @binding(0) var<storage, read> x: array<f32>;
@group(2) @binding(1) var<storage, read> x_start: array<f32>;
@group(2) @binding(2) var<storage, read> target_positions: array<f32>;
// Handle springs grouped by vertex: (position, stiffness).
@group(2) @binding(3) var<storage, read> anchor_offsets: array<u32>;
@group(2) @binding(4) var<storage, read> anchors: array<vec4<f32>>;
// Per part, its frame (shared/frame).
@group(2) @binding(5) var<storage, read> frame_offsets: array<vec4<f32>>;

@group(3) @binding(0) var<storage, read> corner_gradients: array<vec4<f32>>;
@group(3) @binding(1) var<storage, read_write> gradient: array<f32>;
@group(3) @binding(2) var<storage, read_write> vertex_blocks: array<f32>;
@group(3) @binding(3) var<storage, read_write> gather_partials: array<vec4<f32>>;
@group(3) @binding(4) var<storage, read> damping_blocks: array<f32>;
@group(3) @binding(5) var<storage, read> damping_linear: array<vec4<f32>>;
// Under the projection model, per vertex: the outward normal of the collider it rests on and
// is pressed against, and the normal force (w > 0 only where pressed).
@group(3) @binding(6) var<storage, read_write> pressed: array<vec4<f32>>;
@group(3) @binding(7) var<storage, read> coupling_records: array<vec4<f32>>;
@group(3) @binding(8) var<storage, read> coupling_offsets: array<u32>;
// Sorted here, in place, per vertex.
@group(3) @binding(9) var<storage, read_write> coupling_list: array<u32>;
// The detection's counts, cleared here for the next.
@group(3) @binding(10) var<storage, read_write> coupling_counts: array<u32>;
// Newton's right-hand side, -grad G (where `rhs`).
@group(3) @binding(11) var<storage, read_write> rhs: array<f32>;
// With the right-hand side, its vertex terms' part (all but the elements' corner forces):
// summed over a free part, the part's translational force, which the elements' forces, zero
// in sum, would leave as it is but for their f32 rounding (see `translation_from` in pcg.wgsl).
@group(3) @binding(12) var<storage, read_write> vertex_rhs: array<f32>;
// Factors F of D's vertex blocks (`w A_v = F F^T`), row-major, in the vertices' parts' axes:
// the damping's energy there is |F^T dx|^2 / 2, which f32 cannot take below zero.
@group(3) @binding(13) var<storage, read> damping_vertex_factors: array<f32>;

// `params.rhs`: the right-hand side and its vertex terms' part.
const RHS_AND_VERTEX_TERMS: u32 = 2u;
// f32's relative precision, 2^-23: the noise floor's unit.
const PRECISION: f32 = 1.1920929e-7;
// `params.damped`: with Rayleigh's matrix.
const DAMPED_RAYLEIGH: u32 = 2u;

// The batch member this workgroup evaluates (0 outside a batch).
var<private> member: u32 = 0u;

fn load(buffer_index: u32, v: u32) -> vec3<f32> {
    if (buffer_index == 0u) {
        let at = 3u * (member * params.vertex_count + v);
        return vec3<f32>(x[at], x[at + 1u], x[at + 2u]);
    }
    if (buffer_index == 1u) {
        return vec3<f32>(x_start[3u * v], x_start[3u * v + 1u], x_start[3u * v + 2u]);
    }
    return vec3<f32>(target_positions[3u * v], target_positions[3u * v + 1u], target_positions[3u * v + 2u]);
}

// Where vertex v's displacements are measured from, in its part's axes.
fn rest_position(v: u32) -> vec3<f32> {
    return vec3<f32>(rest[3u * v], rest[3u * v + 1u], rest[3u * v + 2u]);
}

fn node(q: u32) -> vec2<f32> {
    if (q == 0u) {
        return vec2<f32>(params.weight_0, params.theta_0);
    }
    return vec2<f32>(params.weight_1, params.theta_1);
}

// The conservative potential of vertex v at z = at + d, `at` its rest position and `d` its
// displacement, both in the axes of its part's frame `f` (gravity, penalties, handles): its
// value, and in those axes its gradient and Hessian; its force magnitude, the part of it
// from terms whose rounding does not scale with the displacement (colliders, handles), and
// those terms' forces times the size of the numbers they are formed from (`rounding`: the
// point from the part's offset, the collider's own, the handle's). Gravity's value is weighed
// against `d` alone (turned into the world's axes); the host adds its value at the
// reference positions in f64 (`GpuBuffers::reference_gravity_energy`): summed from absolute
// positions in f32, a body 1 km up carried 0.1 J of noise per 200 kg in every energy, which
// the energy-controlled integrators then chased.
struct Potential {
    value: f32,
    gradient: vec3<f32>,
    hessian: mat3x3<f32>,
    forces: f32,
    absolute: f32,
    rounding: f32,
}

fn potential(v: u32, f: PartFrame, at: vec3<f32>, d: vec3<f32>) -> Potential {
    let z = at + d;
    let weight = unturned(f.turn, masses[v] * vec3<f32>(params.gravity_x, params.gravity_y, params.gravity_z));
    var out = Potential(-dot(weight, d), -weight, mat3x3<f32>(), length(weight), 0.0, 0.0);
    let k = params.contact_stiffness;
    let size = largest(z);
    for (var c = 0u; c < params.collider_count && k > 0.0; c++) {
        let collider = part_collider(f, c);
        let d = distance_in(collider, f, z);
        // The quadratic penalty's curvature counts on the surface too (`ContactModel::active`).
        if (d.phi < 0.0 || (d.phi == 0.0 && params.cubic == 0u)) {
            // k phi^2 / 2, or the cubic k |phi|^3 (the CPU twin's `ContactModel::energy` and
            // `derivatives`).
            var value = 0.5 * k * d.phi * d.phi;
            var first = k * d.phi;
            var second = k;
            if (params.cubic != 0u) {
                value = -k * d.phi * d.phi * d.phi;
                first = -3.0 * k * d.phi * d.phi;
                second = -6.0 * k * d.phi;
            }
            out.value += value;
            out.gradient += d.normal * first;
            out.forces += abs(first);
            out.absolute += abs(first);
            out.rounding += abs(first) * max(size, collider_scale(collider));
            // Along the normal the penalty's own curvature; across it the surface's curvature
            // times the slope (<= 0 on convex shapes), which the projection drops.
            out.hessian += outer3(d.normal, d.normal) * second;
            if (params.exact_hessian != 0u) {
                out.hessian += d.hessian * first;
            }
        }
    }
    for (var i = anchor_offsets[v]; i < anchor_offsets[v + 1u]; i++) {
        let spring = anchors[i];
        // The handle's position in the part's axes (the host placed it from the part's
        // offset).
        let stretch = z - unturned(f.turn, spring.xyz);
        out.value += 0.5 * spring.w * dot(stretch, stretch);
        out.gradient += stretch * spring.w;
        out.forces += spring.w * length(stretch);
        out.absolute += spring.w * length(stretch);
        out.rounding += spring.w * length(stretch) * max(size, largest(spring.xyz));
        out.hessian += IDENTITY3 * spring.w;
    }
    return out;
}

// IPC's log barrier -k (phi - d)^2 ln(phi / d) of every collider within its distance d of z
// (the twin of `ContactModel::energy` and `derivatives`): infinite energy inside a collider,
// where its derivatives are left out (no iterate is ever there).
fn barrier(f: PartFrame, z: vec3<f32>) -> Potential {
    var out = Potential(0.0, vec3<f32>(0.0), mat3x3<f32>(), 0.0, 0.0, 0.0);
    let reach = params.barrier_distance;
    let k = params.barrier_stiffness;
    let size = largest(z);
    for (var c = 0u; c < params.collider_count; c++) {
        let collider = part_collider(f, c);
        let d = distance_in(collider, f, z);
        if (d.phi <= 0.0) {
            out.value = bitcast<f32>(0x7f800000u);
        } else if (d.phi < reach) {
            let gap = d.phi - reach;
            let log_ratio = log(d.phi / reach);
            let first = -k * (2.0 * gap * log_ratio + gap * gap / d.phi);
            let second = -k * (2.0 * log_ratio + 4.0 * gap / d.phi - gap * gap / (d.phi * d.phi));
            out.value -= k * gap * gap * log_ratio;
            out.gradient += d.normal * first;
            out.forces += abs(first);
            out.absolute += abs(first);
            out.rounding += abs(first) * max(size, collider_scale(collider));
            out.hessian += outer3(d.normal, d.normal) * second;
            if (params.exact_hessian != 0u) {
                out.hessian += d.hessian * first;
            }
        }
    }
    return out;
}

// The friction couplings' vector: dx = x - x_n.
fn coupled_vector(u: u32) -> vec3<f32> {
    return load(0u, u) - load(1u, u);
}

fn contact_records() -> CouplingSet {
    return coupling_set(params.contact_set, params.surface_count, params.vertex_count);
}

// Self-contact's energy at vertex v: its own records', one per quadrature node.
fn self_contact_energy(v: u32) -> f32 {
    let s = surface_index[v];
    if (params.surface_count == 0u || params.node_count == 0u || s == NO_VERTEX) {
        return 0.0;
    }
    var energy = 0.0;
    for (var q = 0u; q < params.node_count; q++) {
        let slot = contact_records().records + q * params.surface_count + s;
        if (record_vertices(slot).x != NO_VERTEX) {
            energy += coupling_records[RECORD * slot + 2u].w;
        }
    }
    return energy;
}

// Self-contact's gradient, block and force magnitude at vertex v from every record it is in,
// summed by ascending slot (its list sorted first, in place, for the same bits every run).
struct ContactTerms {
    gradient: vec3<f32>,
    block: mat3x3<f32>,
    forces: f32,
}

fn self_contact_terms(v: u32) -> ContactTerms {
    var out = ContactTerms(vec3<f32>(0.0), mat3x3<f32>(), 0.0);
    if (params.surface_count == 0u || params.node_count == 0u) {
        return out;
    }
    coupling_counts[v] = 0u;
    let records = contact_records();
    let begin = records.list + coupling_offsets[records.offsets + v];
    let end = records.list + coupling_offsets[records.offsets + v + 1u];
    for (var k = begin + 1u; k < end; k++) {
        let value = coupling_list[k];
        var j = k;
        while (j > begin && coupling_list[j - 1u] > value) {
            coupling_list[j] = coupling_list[j - 1u];
            j -= 1u;
        }
        coupling_list[j] = value;
    }
    for (var k = begin; k < end; k++) {
        let slot = records.records + coupling_list[k];
        let c = coupling_records[RECORD * slot + 1u][record_role(record_vertices(slot), v)];
        let g = coupling_records[RECORD * slot + 2u].xyz;
        out.gradient += g * c;
        out.block += record_block(slot) * (c * c);
        out.forces += abs(c) * length(g);
    }
    return out;
}

fn store_block(v: u32, block: mat3x3<f32>) {
    // Row-major, as the CPU twin; the blocks here are symmetric.
    for (var r = 0u; r < 3u; r++) {
        for (var c = 0u; c < 3u; c++) {
            vertex_blocks[9u * v + 3u * r + c] = block[c][r];
        }
    }
}

// Writes vertex v's gradient g, and where asked Newton's right-hand side and the vertex
// terms' part of it (`own`, g less the elements' forces).
fn store_gradient(v: u32, g: vec3<f32>, own: vec3<f32>) {
    for (var c = 0u; c < 3u; c++) {
        gradient[3u * v + c] = g[c];
        if (params.rhs != 0u) {
            rhs[3u * v + c] = -g[c];
        }
        if (params.rhs == RHS_AND_VERTEX_TERMS) {
            vertex_rhs[3u * v + c] = -own[c];
        }
    }
}

// Factor F of D's vertex block at v (`damping_vertex_factors`).
fn damping_factor(v: u32) -> mat3x3<f32> {
    let o = 9u * v;
    // The rows read as columns, then turned.
    return transpose(mat3x3<f32>(
        damping_vertex_factors[o], damping_vertex_factors[o + 1u], damping_vertex_factors[o + 2u],
        damping_vertex_factors[o + 3u], damping_vertex_factors[o + 4u], damping_vertex_factors[o + 5u],
        damping_vertex_factors[o + 6u], damping_vertex_factors[o + 7u], damping_vertex_factors[o + 8u],
    ));
}

// (energy, |g|^2, force scale, squared noise floor) of vertex v; writes its gradient and block
// when asked (else only the energy counts).
fn vertex(v: u32) -> vec4<f32> {
    // Displacements (x, x_n) and where the vertex is.
    let xv = load(0u, v);
    let start = load(1u, v);
    let at = rest_position(v);
    let frame = part_frame(v);
    if (pinned[v] != 0u) {
        // A pinned vertex never leaves x_n: only its (constant) potential counts.
        var energy = 0.0;
        for (var q = 0u; q < params.node_count; q++) {
            let cw = node(q);
            energy += cw.x * potential(v, frame, at, xv * cw.y + start * (1.0 - cw.y)).value;
        }
        energy += self_contact_energy(v);
        if (params.derivatives != 0u) {
            if (params.surface_count != 0u && params.node_count != 0u) {
                coupling_counts[v] = 0u;
            }
            store_gradient(v, vec3<f32>(0.0), vec3<f32>(0.0));
            store_block(v, IDENTITY3);
            if (params.projection != 0u) {
                pressed[v] = vec4<f32>(0.0);
            }
        }
        return vec4<f32>(energy, 0.0, 0.0, 0.0);
    }
    let mass = masses[v] * params.inv_h2;
    let offset = xv - load(2u, v);
    let inertia = offset * mass;
    // Inertia's energy measured from the start, 1/2 m/h^2 (|u - w|^2 - |w|^2) with u = x - x_n
    // and w = y - x_n; the host adds the rest, 1/2 m/h^2 |w|^2, in f64
    // (`gather::target_inertia`). A target far from the start (AVF's h^2/12 M^-1 f(x_n) of a
    // stiff spinning body lies metres off) made |x - y|^2 a number whose f32 rounding hid the
    // decreases the line search must see: the solve stalled and the step gained energy.
    let moved = xv - start;
    var energy = 0.5 * mass * dot(moved, moved - 2.0 * (load(2u, v) - start));
    var acc = inertia;
    var block = IDENTITY3 * mass;
    var forces = length(inertia);
    // The forces of the terms whose rounding does not scale with the displacement, and that
    // rounding's scale times them.
    var absolute = 0.0;
    var rounding = 0.0;
    for (var q = 0u; q < params.node_count; q++) {
        let cw = node(q);
        let u = potential(v, frame, at, xv * cw.y + start * (1.0 - cw.y));
        energy += cw.x * u.value;
        acc += u.gradient * (cw.x * cw.y);
        block += u.hessian * (cw.x * cw.y * cw.y);
        forces += u.forces * cw.x * cw.y;
        absolute += u.absolute * cw.x * cw.y;
        rounding += u.rounding * cw.x * cw.y;
    }
    if (params.barrier_stiffness > 0.0) {
        let w = params.end_weight;
        let b = barrier(frame, at + xv);
        energy += w * b.value;
        acc += b.gradient * w;
        block += b.hessian * w;
        forces += b.forces * w;
        absolute += b.absolute * w;
        rounding += b.rounding * w;
    }
    // The vertex terms' gradient: acc less the elements' forces and the damping's stiffness
    // part, which sum to zero over a free part.
    var own = acc;
    if (params.damped != 0u) {
        let dx_v = xv - start;
        // Row v of Rayleigh's k/h K dx.
        var force = vec3<f32>(0.0);
        for (var j = 0u; params.damped == DAMPED_RAYLEIGH && j < row_offsets[v + 1u] - row_offsets[v]; j++) {
            let s = matrix_slot(v, j);
            let u = slot_columns[s];
            let dx = load(0u, u) - load(1u, u);
            force += vec3<f32>(
                damping_blocks[matrix_entry(s, 0u)] * dx.x + damping_blocks[matrix_entry(s, 1u)] * dx.y + damping_blocks[matrix_entry(s, 2u)] * dx.z,
                damping_blocks[matrix_entry(s, 3u)] * dx.x + damping_blocks[matrix_entry(s, 4u)] * dx.y + damping_blocks[matrix_entry(s, 5u)] * dx.z,
                damping_blocks[matrix_entry(s, 6u)] * dx.x + damping_blocks[matrix_entry(s, 7u)] * dx.y + damping_blocks[matrix_entry(s, 8u)] * dx.z,
            );
        }
        energy += 0.5 * dot(dx_v, force);
        // The vertex block's, F (F^T dx), and its energy |F^T dx|^2 / 2.
        let f = damping_factor(v);
        let reduced = dx_v * f;
        let vertex_force = f * reduced;
        energy += 0.5 * dot(reduced, reduced);
        var coupled = vec3<f32>(0.0);
        if (params.friction != 0u) {
            // The friction couplings' blocks between vertices (their diagonal is in the
            // vertex block).
            coupled = coupling_row(v, coupling_set(FRICTION_SET, params.surface_count, params.vertex_count));
        }
        let linear = damping_linear[v];
        energy += 0.5 * dot(dx_v, coupled) - dot(linear.xyz, dx_v) + linear.w;
        force += vertex_force + coupled - linear.xyz;
        acc += force;
        forces += length(force);
        if (params.derivatives != 0u) {
            block += f * transpose(f);
        }
        // D's vertex terms: its vertex block (the couplings' diagonal with the drag's, not
        // Rayleigh's part), the couplings and the linear terms.
        own += vertex_force + coupled - linear.xyz;
    }
    energy += self_contact_energy(v);
    if (params.derivatives == 0u) {
        return vec4<f32>(energy, 0.0, 0.0, 0.0);
    }
    let contact = self_contact_terms(v);
    acc += contact.gradient;
    own += contact.gradient;
    block += contact.block;
    forces += contact.forces;
    absolute += contact.forces;
    // Self-contact keeps every part in the world's axes and measures from the first part's
    // offset (shaders/self_contact.wgsl): its terms round with the position from there.
    let position = frame.offset - frame_offsets[0].xyz + turned(frame.turn, at + xv);
    rounding += contact.forces * largest(position);
    // Four corners' loads are issued before their sums (in the same order as one at a time):
    // one by one, each corner's two dependent loads made the pass a chain of latencies, about
    // 15 us on an H200 whatever the body's size.
    let end = corner_offsets[v + 1u];
    var i = corner_offsets[v];
    for (; i + 4u <= end; i += 4u) {
        let s = vec4<u32>(corners[i], corners[i + 1u], corners[i + 2u], corners[i + 3u]);
        let f0 = corner_gradients[corner(s.x, params.tet_count, params.spring_count)].xyz;
        let f1 = corner_gradients[corner(s.y, params.tet_count, params.spring_count)].xyz;
        let f2 = corner_gradients[corner(s.z, params.tet_count, params.spring_count)].xyz;
        let f3 = corner_gradients[corner(s.w, params.tet_count, params.spring_count)].xyz;
        acc += f0;
        forces += length(f0);
        acc += f1;
        forces += length(f1);
        acc += f2;
        forces += length(f2);
        acc += f3;
        forces += length(f3);
    }
    for (; i < end; i++) {
        let f = corner_gradients[corner(corners[i], params.tet_count, params.spring_count)].xyz;
        acc += f;
        forces += length(f);
    }
    if (params.projection != 0u) {
        // A vertex resting on a collider that the gradient presses it into loses the
        // gradient's normal part, which the collider balances.
        var press = vec4<f32>(0.0);
        let n = resting_normal(frame, at + xv);
        if (n.w > 0.0) {
            let force = dot(acc, n.xyz);
            if (force > 0.0) {
                acc -= n.xyz * force;
                own -= n.xyz * force;
                press = vec4<f32>(n.xyz, force);
            }
        }
        pressed[v] = press;
    }
    store_gradient(v, acc, own);
    store_block(v, block);
    // G's noise floor: forces times the size of what rounds under them. The terms of
    // colliders, handles and self-contact round with the numbers they are formed from
    // (`rounding`); the others (inertia, gravity, elasticity, damping) with the displacement
    // from the reference, or with the part's reach (its size, a conservative bound for its
    // elements' own rounding). Counted from absolute positions everywhere, a body 1 km from
    // the origin took any step that raised G by less than about 5 J per 200 kg as flat.
    let local = frame.reach + largest(xv);
    // Squared: the vertices' roundings are independent, so they add as a root sum of
    // squares, not as the worst case of all in one direction. Scaled to f32's precision
    // (a power of two, exact) before squaring: unscaled, a stiff bar's explicit guess 600 m
    // off (forces 1e18 N) squared past f32's range, the floor came out infinite, and every
    // step of its Newton solve counted as flat, so the solve ended there, 'converged'.
    let noise = PRECISION * ((forces - absolute) * local + rounding);
    return vec4<f32>(energy, dot(acc, acc), forces, noise * noise);
}

@compute @workgroup_size(WORKGROUP)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let place = batch_place(group, groups, params.vertex_count);
    member = place.x;
    let slot = place.y;
    let index = slot * WORKGROUP + lid;
    // A two-dimensional dispatch's last row runs past the batch's members.
    let in_batch = member < max(params.members, 1u);
    var sums = vec4<f32>(0.0);
    if (index < params.vertex_count && in_batch) {
        sums = vertex(index);
    }
    let total = workgroup_sum(lid, sums);
    if (lid == 0u && slot * WORKGROUP < params.vertex_count && in_batch) {
        // Member by member, each member's partials in a row.
        gather_partials[workgroup_slot(group, groups)] = total;
    }
}
