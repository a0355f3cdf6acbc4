// Stage `local` of the local/global solver, the twin of src/backend/cpu/local.rs: each tet's
// closest rotation at each quadrature node by Newton's method on SO(3), warm-started from the
// tet's rotation of the previous iteration (kept as a quaternion in `rotations`), then the
// energy and corner gradients of its projective (corotated or ARAP) energy in the slots of
// shared/slots.wgsl, and per-workgroup energy sums. Springs stay with the element stage.
//
// Everything is written in small quantities — the displacement gradient h = F - I, R - I from
// the quaternion, D = R^T F - I — so that nothing cancels in f32 near rest.

#import shared/eigensystem
#import shared/reduce
#import shared/slots
#import shared/tets

const MAX_ITERATIONS: u32 = 8u;
// A Newton step below this angle leaves an error near its square, below f32 resolution.
const CONVERGED: f32 = 1e-6;

// Per node and tet (node q of tet e at q T + e): the last rotation, a unit quaternion (xyz, w).
@group(2) @binding(2) var<storage, read_write> rotations: array<vec4<f32>>;

@group(3) @binding(0) var<storage, read_write> corner_gradients: array<f32>;
@group(3) @binding(1) var<storage, read_write> energy_partials: array<f32>;

// [v]x, the matrix of v x (.).
fn cross_matrix(v: vec3<f32>) -> mat3x3<f32> {
    return mat3x3<f32>(vec3<f32>(0.0, v.z, -v.y), vec3<f32>(-v.z, 0.0, v.x), vec3<f32>(v.y, -v.x, 0.0));
}

// R - I for the unit quaternion q: 2 w [v]x + 2 [v]x^2.
fn rotation_minus_identity(q: vec4<f32>) -> mat3x3<f32> {
    let k = cross_matrix(q.xyz);
    return (k * q.w + k * k) * 2.0;
}

fn quaternion_product(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(a.w * b.xyz + b.w * a.xyz + cross(a.xyz, b.xyz), a.w * b.w - dot(a.xyz, b.xyz));
}

// The unit quaternion of the rotation r (Shepperd: from the largest of w, x, y, z).
fn quaternion_of(r: mat3x3<f32>) -> vec4<f32> {
    let trace = r[0].x + r[1].y + r[2].z;
    if (trace > 0.0) {
        let s = 2.0 * sqrt(1.0 + trace);
        return vec4<f32>((r[1].z - r[2].y) / s, (r[2].x - r[0].z) / s, (r[0].y - r[1].x) / s, 0.25 * s);
    }
    if (r[0].x > r[1].y && r[0].x > r[2].z) {
        let s = 2.0 * sqrt(1.0 + r[0].x - r[1].y - r[2].z);
        return vec4<f32>(0.25 * s, (r[1].x + r[0].y) / s, (r[2].x + r[0].z) / s, (r[1].z - r[2].y) / s);
    }
    if (r[1].y > r[2].z) {
        let s = 2.0 * sqrt(1.0 + r[1].y - r[0].x - r[2].z);
        return vec4<f32>((r[1].x + r[0].y) / s, 0.25 * s, (r[2].y + r[1].z) / s, (r[2].x - r[0].z) / s);
    }
    let s = 2.0 * sqrt(1.0 + r[2].z - r[0].x - r[1].y);
    return vec4<f32>((r[2].x + r[0].z) / s, (r[2].y + r[1].z) / s, 0.25 * s, (r[0].y - r[1].x) / s);
}

// The rotation closest to F = I + h, from `warm` (twin of material::closest_rotation): with
// D = R^T F - I, the Newton step on SO(3) solves (tr(R^T F) I - sym(R^T F)) w = axial(D - D^T);
// where that matrix is not definite the signed SVD answers.
fn closest_rotation(h: mat3x3<f32>, warm: vec4<f32>) -> vec4<f32> {
    let f = h + mat3x3<f32>(vec3<f32>(1.0, 0.0, 0.0), vec3<f32>(0.0, 1.0, 0.0), vec3<f32>(0.0, 0.0, 1.0));
    let scale = max(max(max(abs(f[0].x), abs(f[0].y)), max(abs(f[0].z), abs(f[1].x))),
        max(max(abs(f[1].y), abs(f[1].z)), max(max(abs(f[2].x), abs(f[2].y)), abs(f[2].z))));
    let floor = 1e-6 * scale;
    var q = warm;
    for (var it = 0u; it < MAX_ITERATIONS; it++) {
        let rmi = rotation_minus_identity(q);
        let d = transpose(rmi) + transpose(rmi) * h + h;
        let axial = vec3<f32>(d[1].z - d[2].y, d[2].x - d[0].z, d[0].y - d[1].x);
        let trace = d[0].x + d[1].y + d[2].z;
        let dd = vec3<f32>(2.0 + trace - d[0].x, 2.0 + trace - d[1].y, 2.0 + trace - d[2].z);
        let xy = -0.5 * (d[0].y + d[1].x);
        let xz = -0.5 * (d[0].z + d[2].x);
        let yz = -0.5 * (d[1].z + d[2].y);
        let c = vec3<f32>(dd.y * dd.z - yz * yz, dd.x * dd.z - xz * xz, dd.x * dd.y - xy * xy);
        let cxy = xz * yz - xy * dd.z;
        let cxz = xy * yz - xz * dd.y;
        let cyz = xy * xz - yz * dd.x;
        let det = dd.x * c.x + xy * cxy + xz * cxz;
        if (!(dd.x > floor && c.z > floor * scale && det > floor * scale * scale)) {
            break;
        }
        let step = vec3<f32>(
            c.x * axial.x + cxy * axial.y + cxz * axial.z,
            cxy * axial.x + c.y * axial.y + cyz * axial.z,
            cxz * axial.x + cyz * axial.y + c.z * axial.z,
        ) / det;
        q = normalize(quaternion_product(q, vec4<f32>(0.5 * step, 1.0)));
        if (dot(step, step) < CONVERGED * CONVERGED) {
            return q;
        }
    }
    let svd = signed_svd(f);
    return normalize(quaternion_of(svd.u * transpose(svd.v)));
}

// Tet e's projective energy at the nodes; its corner gradients and rotations are stored.
fn tet(e: u32) -> f32 {
    let t = load_tet(e);
    let material = tet_material[e];
    let mu = material.y;
    let lambda = select(material.z, 0.0, u32(material.x) == ARAP);
    var energy = 0.0;
    var p = mat3x3<f32>(vec3<f32>(0.0), vec3<f32>(0.0), vec3<f32>(0.0));
    for (var q = 0u; q < params.node_count; q++) {
        let cw = node(q);
        let h = displacement_gradient(t, cw.y);
        let slot = q * params.tet_count + e;
        let rotation = closest_rotation(h, rotations[slot]);
        rotations[slot] = rotation;
        let rmi = rotation_minus_identity(rotation);
        // F - R = h - (R - I); tr(R^T F) - 3 = tr((R - I)^T + R^T h).
        let shear = h - rmi;
        let d = transpose(rmi) + transpose(rmi) * h + h;
        let stretch = d[0].x + d[1].y + d[2].z;
        let psi = mu * (dot(shear[0], shear[0]) + dot(shear[1], shear[1]) + dot(shear[2], shear[2]))
            + 0.5 * lambda * stretch * stretch;
        energy += cw.x * t.volume * psi;
        let identity = mat3x3<f32>(vec3<f32>(1.0, 0.0, 0.0), vec3<f32>(0.0, 1.0, 0.0), vec3<f32>(0.0, 0.0, 1.0));
        p += (shear * (2.0 * mu) + (identity + rmi) * (lambda * stretch)) * (cw.x * cw.y * t.volume);
    }
    store_corner(e, 0u, p * t.b0);
    store_corner(e, 1u, p * t.b1);
    store_corner(e, 2u, p * t.b2);
    store_corner(e, 3u, p * t.b3);
    return energy;
}

@compute @workgroup_size(WORKGROUP)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let index = slot * WORKGROUP + lid;
    var energy = 0.0;
    if (index < params.count) {
        energy = tet(params.first + index);
    }
    reduce(lid, slot, energy);
}
