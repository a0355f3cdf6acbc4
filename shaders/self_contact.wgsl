// Stage `self_contact`, the twin of src/contact/self_contact.rs on the device: the boundary
// vertices inside a tet that is not of their own neighbourhood, the nearest boundary point of
// the part they are in, and the penalty Phi = k d sqrt(d + eps) of each, written as coupling
// records (shared/couplings) for every quadrature node. Per evaluation:
// - `refit`, once per tree depth from the deepest: the boxes of the tet and triangle trees
//   (built at rest on the host by `mesh::bvh`, both in one node array) at each node's
//   positions;
// - `detect`, per boundary vertex and node: the two tree queries, in the CPU twin's order,
//   and the record (the slots of nodes past `node_count` are left as they are: no reader
//   goes there); with `link` it also counts each record's vertices;
// - `scan` (one workgroup) and `fill`, with `link`: each vertex's list of records, which the
//   gather then sorts.

#import shared/dispatch
#import shared/couplings

struct Params {
    vertex_count: u32,
    surface_count: u32,
    // Nodes [0, tet_node_count) of the tree arrays are the tet tree's, the rest the
    // triangle tree's.
    tet_node_count: u32,
    tree_node_count: u32,
    node_count: u32,
    weight_0: f32,
    theta_0: f32,
    weight_1: f32,
    theta_1: f32,
    stiffness: f32,
    // The record set written (0 the Newton linearization's, 1 any other evaluation's).
    record_set: u32,
    link: u32,
    // `refit`'s nodes: tree_levels[level_first..level_first + level_count].
    level_first: u32,
    level_count: u32,
}

@group(0) @binding(0) var<uniform> params: Params;

@group(1) @binding(0) var<storage, read> tets: array<vec4<u32>>;
@group(1) @binding(1) var<storage, read> pinned: array<u32>;
@group(1) @binding(2) var<storage, read> rest: array<f32>;
@group(1) @binding(3) var<storage, read> surface_triangles: array<vec4<u32>>;
@group(1) @binding(4) var<storage, read> surface_vertices: array<u32>;
@group(1) @binding(5) var<storage, read> vertex_part: array<u32>;
// Per tree node (first, count), as `Bvh::links`; a triangle-tree node's `first` is already
// offset into these arrays.
@group(1) @binding(6) var<storage, read> tree_links: array<vec2<u32>>;
@group(1) @binding(7) var<storage, read> tree_order: array<u32>;
@group(1) @binding(8) var<storage, read> tree_levels: array<u32>;
// `SelfContact::near_offsets` and `near`: each boundary vertex's own neighbourhood.
@group(1) @binding(9) var<storage, read> neighbourhood_offsets: array<u32>;
@group(1) @binding(10) var<storage, read> neighbourhood: array<u32>;
// Per vertex, its part (shared/frame). A model with self-contact keeps every part's axes the
// world's (its couplings join parts), so that a part's frame is its offset alone.
@group(1) @binding(11) var<storage, read> frame_parts: array<u32>;

// Displacements from the rest positions (the auxiliary positions bound as both, for the
// potential at a given state).
@group(2) @binding(0) var<storage, read> x: array<f32>;
@group(2) @binding(1) var<storage, read> x_start: array<f32>;
@group(2) @binding(2) var<storage, read> frame_offsets: array<vec4<f32>>;

// Per quadrature node and tree node, (lo, hi).
@group(3) @binding(0) var<storage, read_write> tree_boxes: array<vec4<f32>>;
@group(3) @binding(1) var<storage, read_write> coupling_records: array<vec4<f32>>;
@group(3) @binding(2) var<storage, read_write> coupling_counts: array<atomic<u32>>;
@group(3) @binding(3) var<storage, read_write> coupling_offsets: array<u32>;
@group(3) @binding(4) var<storage, read_write> coupling_list: array<u32>;

// The CPU twin's `EPSILON` (m^2).
const EPSILON: f32 = 1e-15;
const NONE: u32 = 0xffffffffu;
const STACK: u32 = 64u;

fn node(q: u32) -> vec2<f32> {
    if (q == 0u) {
        return vec2<f32>(params.weight_0, params.theta_0);
    }
    return vec2<f32>(params.weight_1, params.theta_1);
}

// Vertex u at quadrature position theta: theta x + (1 - theta) x_n.
fn position(u: u32, theta: f32) -> vec3<f32> {
    let i = 3u * u;
    // From the first part's offset: under self-contact every part keeps the world's axes, and
    // the offsets are f32 values, whose differences are exact where parts meet. From the
    // world's origin, positions 10 km out rounded to 1 mm, twice the cubes' contact depth.
    let part = frame_offsets[2u * frame_parts[u]].xyz - frame_offsets[0].xyz;
    let at = vec3<f32>(rest[i], rest[i + 1u], rest[i + 2u]) + part;
    let moved = vec3<f32>(x[i], x[i + 1u], x[i + 2u]);
    let start = vec3<f32>(x_start[i], x_start[i + 1u], x_start[i + 2u]);
    return at + moved * theta + start * (1.0 - theta);
}

fn box_index(q: u32, n: u32) -> u32 {
    return 2u * (q * params.tree_node_count + n);
}

@compute @workgroup_size(WORKGROUP)
fn refit(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let index = workgroup_slot(group, groups) * WORKGROUP + lid;
    if (index >= params.level_count * params.node_count) {
        return;
    }
    let q = index / params.level_count;
    let n = tree_levels[params.level_first + index % params.level_count];
    let theta = node(q).y;
    let link = tree_links[n];
    var lo = vec3<f32>(bitcast<f32>(0x7f800000u));
    var hi = -lo;
    if (link.y > 0u) {
        for (var k = link.x; k < link.x + link.y; k++) {
            let t = tree_order[k];
            var corners: vec4<u32>;
            var count = 3u;
            if (n < params.tet_node_count) {
                corners = tets[t];
                count = 4u;
            } else {
                corners = surface_triangles[t];
            }
            for (var c = 0u; c < count; c++) {
                let p = position(corners[c], theta);
                lo = min(lo, p);
                hi = max(hi, p);
            }
        }
    } else {
        let left = box_index(q, n + 1u);
        let right = box_index(q, link.x);
        lo = min(tree_boxes[left].xyz, tree_boxes[right].xyz);
        hi = max(tree_boxes[left + 1u].xyz, tree_boxes[right + 1u].xyz);
    }
    let b = box_index(q, n);
    tree_boxes[b] = vec4<f32>(lo, 0.0);
    tree_boxes[b + 1u] = vec4<f32>(hi, 0.0);
}

// Whether node n's box at quadrature node q holds p (`Aabb::overlaps` with a point).
fn box_holds(q: u32, n: u32, p: vec3<f32>) -> bool {
    let b = box_index(q, n);
    return all(tree_boxes[b].xyz <= p) && all(p <= tree_boxes[b + 1u].xyz);
}

// Squared distance from p to node n's box at quadrature node q (zero inside).
fn box_distance_squared(q: u32, n: u32, p: vec3<f32>) -> f32 {
    let b = box_index(q, n);
    let gap = max(max(tree_boxes[b].xyz - p, p - tree_boxes[b + 1u].xyz), vec3<f32>(0.0));
    return dot(gap, gap);
}

// Whether `t` is in boundary vertex s's neighbourhood of `kind` (0 tets, 1 triangles).
fn is_near(s: u32, kind: u32, t: u32) -> bool {
    var lo = neighbourhood_offsets[2u * s + kind];
    var hi = neighbourhood_offsets[2u * s + kind + 1u];
    while (lo < hi) {
        let mid = (lo + hi) / 2u;
        let value = neighbourhood[mid];
        if (value == t) {
            return true;
        }
        if (value < t) {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    return false;
}

// p lies in the tet with corners a, b, c, d (on its faces included); false for a flat one.
fn inside_tet(p: vec3<f32>, a: vec3<f32>, b: vec3<f32>, c: vec3<f32>, d: vec3<f32>) -> bool {
    let e1 = b - a;
    let e2 = c - a;
    let e3 = d - a;
    let det = dot(e1, cross(e2, e3));
    if (det == 0.0 || !(abs(det) < bitcast<f32>(0x7f800000u))) {
        return false;
    }
    let r = p - a;
    let w = vec3<f32>(dot(r, cross(e2, e3)), dot(e1, cross(r, e3)), dot(e1, cross(e2, r))) / det;
    return min(w.x, min(w.y, w.z)) >= 0.0 && w.x + w.y + w.z <= 1.0;
}

// The weights of the point of triangle abc nearest p (`mesh::closest_weights_on_triangle`).
fn closest_weights(p: vec3<f32>, a: vec3<f32>, b: vec3<f32>, c: vec3<f32>) -> vec3<f32> {
    let ab = b - a;
    let ac = c - a;
    let ap = p - a;
    let d1 = dot(ab, ap);
    let d2 = dot(ac, ap);
    if (d1 <= 0.0 && d2 <= 0.0) {
        return vec3<f32>(1.0, 0.0, 0.0);
    }
    let bp = p - b;
    let d3 = dot(ab, bp);
    let d4 = dot(ac, bp);
    if (d3 >= 0.0 && d4 <= d3) {
        return vec3<f32>(0.0, 1.0, 0.0);
    }
    let vc = d1 * d4 - d3 * d2;
    if (vc <= 0.0 && d1 >= 0.0 && d3 <= 0.0) {
        let t = d1 / (d1 - d3);
        return vec3<f32>(1.0 - t, t, 0.0);
    }
    let cp = p - c;
    let d5 = dot(ab, cp);
    let d6 = dot(ac, cp);
    if (d6 >= 0.0 && d5 <= d6) {
        return vec3<f32>(0.0, 0.0, 1.0);
    }
    let vb = d5 * d2 - d1 * d6;
    if (vb <= 0.0 && d2 >= 0.0 && d6 <= 0.0) {
        let t = d2 / (d2 - d6);
        return vec3<f32>(1.0 - t, 0.0, t);
    }
    let va = d3 * d6 - d5 * d4;
    if (va <= 0.0 && d4 - d3 >= 0.0 && d5 - d6 >= 0.0) {
        let t = (d4 - d3) / ((d4 - d3) + (d5 - d6));
        return vec3<f32>(0.0, 1.0 - t, t);
    }
    let denominator = 1.0 / (va + vb + vc);
    let v = vb * denominator;
    let w = vc * denominator;
    return vec3<f32>(1.0 - v - w, v, w);
}

fn triangle_corner(t: u32, c: u32, theta: f32) -> vec3<f32> {
    return position(surface_triangles[t][c], theta);
}

// The part of the first tet (by the CPU twin's traversal order) that holds boundary vertex s
// at p and is not of its neighbourhood; NONE if there is none.
fn host_part(q: u32, s: u32, p: vec3<f32>) -> u32 {
    var stack: array<u32, STACK>;
    var depth = 0u;
    if (params.tet_node_count > 0u) {
        stack[0] = 0u;
        depth = 1u;
    }
    let theta = node(q).y;
    while (depth > 0u) {
        depth -= 1u;
        let n = stack[depth];
        if (!box_holds(q, n, p)) {
            continue;
        }
        let link = tree_links[n];
        if (link.y > 0u) {
            for (var k = link.x; k < link.x + link.y; k++) {
                let t = tree_order[k];
                if (is_near(s, 0u, t)) {
                    continue;
                }
                let c = tets[t];
                let inside = inside_tet(p, position(c.x, theta), position(c.y, theta), position(c.z, theta), position(c.w, theta));
                if (inside) {
                    return vertex_part[c.x];
                }
            }
        } else if (depth + 2u <= STACK) {
            stack[depth] = n + 1u;
            stack[depth + 1u] = link.x;
            depth += 2u;
        }
    }
    return NONE;
}

// The triangle of part `host` nearest p that is not of boundary vertex s's neighbourhood,
// searched as `Bvh::nearest` does; NONE if there is none.
fn nearest_triangle(q: u32, s: u32, p: vec3<f32>, host: u32) -> u32 {
    var stack: array<u32, STACK>;
    var depth = 0u;
    if (params.tree_node_count > params.tet_node_count) {
        stack[0] = params.tet_node_count;
        depth = 1u;
    }
    let theta = node(q).y;
    var best = NONE;
    var bound = bitcast<f32>(0x7f800000u);
    while (depth > 0u) {
        depth -= 1u;
        let n = stack[depth];
        if (box_distance_squared(q, n, p) >= bound) {
            continue;
        }
        let link = tree_links[n];
        if (link.y > 0u) {
            for (var k = link.x; k < link.x + link.y; k++) {
                let t = tree_order[k];
                if (vertex_part[surface_triangles[t].x] != host || is_near(s, 1u, t)) {
                    continue;
                }
                let a = triangle_corner(t, 0u, theta);
                let b = triangle_corner(t, 1u, theta);
                let c = triangle_corner(t, 2u, theta);
                let w = closest_weights(p, a, b, c);
                let u = p - (a * w.x + b * w.y + c * w.z);
                let d = dot(u, u);
                if (d < bound) {
                    best = t;
                    bound = d;
                }
            }
        } else if (depth + 2u <= STACK) {
            // Nearer child last, so it is searched first.
            let left = n + 1u;
            let right = link.x;
            let near_left = box_distance_squared(q, left, p) < box_distance_squared(q, right, p);
            stack[depth] = select(left, right, near_left);
            stack[depth + 1u] = select(right, left, near_left);
            depth += 2u;
        }
    }
    return best;
}

fn write_empty(slot: u32) {
    coupling_records[RECORD * slot] = bitcast<vec4<f32>>(vec4<u32>(NO_VERTEX));
}

fn outer(u: vec3<f32>) -> mat3x3<f32> {
    return mat3x3<f32>(u * u.x, u * u.y, u * u.z);
}

// Boundary vertex s's record at quadrature node q, into `slot`; whether it holds a contact.
fn detect_one(q: u32, s: u32, slot: u32) -> bool {
    let v = surface_vertices[s];
    let cw = node(q);
    let p = position(v, cw.y);
    let host = host_part(q, s, p);
    if (host == NONE) {
        return false;
    }
    let t = nearest_triangle(q, s, p, host);
    if (t == NONE) {
        return false;
    }
    let triangle = surface_triangles[t];
    let a = position(triangle.x, cw.y);
    let b = position(triangle.y, cw.y);
    let c = position(triangle.z, cw.y);
    let w = closest_weights(p, a, b, c);
    let u = p - (a * w.x + b * w.y + c * w.z);
    if (all(u == vec3<f32>(0.0))) {
        return false;
    }
    // d's Hessian over 2 for the vertex alone: off the face n n^T, off an edge the plane
    // square to it, off a corner I.
    var curvature = outer(normalize(u));
    let touching = u32(w.x != 0.0) + u32(w.y != 0.0) + u32(w.z != 0.0);
    if (touching == 1u) {
        curvature = mat3x3<f32>(vec3<f32>(1.0, 0.0, 0.0), vec3<f32>(0.0, 1.0, 0.0), vec3<f32>(0.0, 0.0, 1.0));
    } else if (touching == 2u) {
        var tail = a;
        var head = b;
        if (w.x == 0.0) {
            tail = b;
            head = c;
        } else if (w.y == 0.0) {
            head = c;
        }
        let e = normalize(head - tail);
        curvature = mat3x3<f32>(vec3<f32>(1.0, 0.0, 0.0), vec3<f32>(0.0, 1.0, 0.0), vec3<f32>(0.0, 0.0, 1.0)) - outer(e);
    }
    // Phi, Phi' and Phi'' at d = |u|^2.
    let k = params.stiffness;
    let d = dot(u, u);
    let root = sqrt(d + EPSILON);
    let value = k * d * root;
    let first = k * (root + d / (2.0 * root));
    let second = k * (1.0 / root - d / (4.0 * root * root * root));
    let vertices = vec4<u32>(v, triangle.x, triangle.y, triangle.z);
    var coefficients = vec4<f32>(1.0, -w.x, -w.y, -w.z);
    for (var i = 0u; i < 4u; i++) {
        if (pinned[vertices[i]] != 0u) {
            coefficients[i] = 0.0;
        }
    }
    // Phi' grad^2 d + Phi'' grad d grad d^T, grad d = 2 c u, grad^2 d = 2 c c^T P.
    let block = (curvature * (2.0 * first) + outer(u) * (4.0 * second)) * (cw.x * cw.y * cw.y);
    let base = RECORD * slot;
    coupling_records[base] = bitcast<vec4<f32>>(vertices);
    coupling_records[base + 1u] = coefficients;
    coupling_records[base + 2u] = vec4<f32>(u * (2.0 * first * cw.x * cw.y), cw.x * value);
    coupling_records[base + 3u] = vec4<f32>(block[0], 0.0);
    coupling_records[base + 4u] = vec4<f32>(block[1], 0.0);
    coupling_records[base + 5u] = vec4<f32>(block[2], 0.0);
    return true;
}

@compute @workgroup_size(WORKGROUP)
fn detect(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let index = workgroup_slot(group, groups) * WORKGROUP + lid;
    let surface = params.surface_count;
    if (index >= params.node_count * surface) {
        return;
    }
    let slot = coupling_set(params.record_set, surface, params.vertex_count).records + index;
    if (!detect_one(index / surface, index % surface, slot)) {
        write_empty(slot);
        return;
    }
    if (params.link != 0u) {
        let vertices = record_vertices(slot);
        for (var i = 0u; i < 4u; i++) {
            atomicAdd(&coupling_counts[vertices[i]], 1u);
        }
    }
}

var<workgroup> scan_sums: array<u32, WORKGROUP>;

// One workgroup: each vertex's first list entry from the counts, which it clears (`fill`
// counts again as it places).
@compute @workgroup_size(WORKGROUP)
fn scan(@builtin(local_invocation_index) lid: u32) {
    let n = params.vertex_count;
    let per = (n + WORKGROUP - 1u) / WORKGROUP;
    let begin = min(lid * per, n);
    let end = min(begin + per, n);
    var own = 0u;
    for (var v = begin; v < end; v++) {
        own += atomicLoad(&coupling_counts[v]);
    }
    scan_sums[lid] = own;
    workgroupBarrier();
    for (var stride = 1u; stride < WORKGROUP; stride *= 2u) {
        var value = scan_sums[lid];
        if (lid >= stride) {
            value += scan_sums[lid - stride];
        }
        workgroupBarrier();
        scan_sums[lid] = value;
        workgroupBarrier();
    }
    let base = coupling_set(params.record_set, params.surface_count, n).offsets;
    var running = scan_sums[lid] - own;
    for (var v = begin; v < end; v++) {
        coupling_offsets[base + v] = running;
        running += atomicLoad(&coupling_counts[v]);
        atomicStore(&coupling_counts[v], 0u);
    }
    if (lid == WORKGROUP - 1u) {
        coupling_offsets[base + n] = scan_sums[lid];
    }
}

// Each record into the lists of its four vertices (in any order: the gather sorts them).
@compute @workgroup_size(WORKGROUP)
fn fill(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let index = workgroup_slot(group, groups) * WORKGROUP + lid;
    if (index >= params.node_count * params.surface_count) {
        return;
    }
    let records = coupling_set(params.record_set, params.surface_count, params.vertex_count);
    let vertices = record_vertices(records.records + index);
    if (vertices.x == NO_VERTEX) {
        return;
    }
    for (var i = 0u; i < 4u; i++) {
        let u = vertices[i];
        let k = atomicAdd(&coupling_counts[u], 1u);
        coupling_list[records.list + coupling_offsets[records.offsets + u] + k] = index;
    }
}
