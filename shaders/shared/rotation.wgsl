// The closest rotation to a deformation gradient, in small quantities for f32: the
// displacement gradient h = F - I, R - I from the quaternion, D = R^T F - I. The twin of
// material::closest_rotation (Newton's method on SO(3), the signed SVD where it cannot go).

#import shared/eigensystem

const MAX_ROTATION_ITERATIONS: u32 = 8u;
// A Newton step below this angle leaves an error near its square, below f32 resolution.
const ROTATION_CONVERGED: f32 = 1e-6;

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

// The rotation closest to F = I + h, from `warm` (twin of material::closest_rotation_by): with
// D = R^T F - I, the Newton step on SO(3) solves (tr(R^T F) I - sym(R^T F)) w = axial(D - D^T);
// where that matrix is not definite the signed SVD answers. With `one_step`, the rotation after
// one Newton step (material::RotationSearch::OneStep).
fn closest_rotation(h: mat3x3<f32>, warm: vec4<f32>, one_step: bool) -> vec4<f32> {
    let f = h + mat3x3<f32>(vec3<f32>(1.0, 0.0, 0.0), vec3<f32>(0.0, 1.0, 0.0), vec3<f32>(0.0, 0.0, 1.0));
    let scale = max(max(max(abs(f[0].x), abs(f[0].y)), max(abs(f[0].z), abs(f[1].x))),
        max(max(abs(f[1].y), abs(f[1].z)), max(max(abs(f[2].x), abs(f[2].y)), abs(f[2].z))));
    let floor = 1e-6 * scale;
    var q = warm;
    for (var it = 0u; it < MAX_ROTATION_ITERATIONS; it++) {
        let rmi = rotation_minus_identity(q);
        let d = rotated_strain(rmi, h);
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
        if (one_step || dot(step, step) < ROTATION_CONVERGED * ROTATION_CONVERGED) {
            return q;
        }
    }
    let svd = signed_svd(f);
    return normalize(quaternion_of(svd.u * transpose(svd.v)));
}

// R^T F - I for the rotation with R - I = rmi and F = I + h.
fn rotated_strain(rmi: mat3x3<f32>, h: mat3x3<f32>) -> mat3x3<f32> {
    return transpose(rmi) + transpose(rmi) * h + h;
}

// Energy density and first Piola stress of corotated (ARAP: lambda 0) at F = I + h with its
// closest rotation R = I + rmi: mu |F - R|^2 + lambda/2 (tr(R^T F) - 3)^2 and
// 2 mu (F - R) + lambda (tr(R^T F) - 3) R; `stretch` is tr(R^T F) - 3.
struct Corotated {
    psi: f32,
    p: mat3x3<f32>,
    stretch: f32,
}

fn corotated_at(h: mat3x3<f32>, rmi: mat3x3<f32>, mu: f32, lambda: f32) -> Corotated {
    let shear = h - rmi;
    let d = rotated_strain(rmi, h);
    let stretch = d[0].x + d[1].y + d[2].z;
    let psi = mu * (dot(shear[0], shear[0]) + dot(shear[1], shear[1]) + dot(shear[2], shear[2]))
        + 0.5 * lambda * stretch * stretch;
    let r = rmi + mat3x3<f32>(vec3<f32>(1.0, 0.0, 0.0), vec3<f32>(0.0, 1.0, 0.0), vec3<f32>(0.0, 0.0, 1.0));
    return Corotated(psi, shear * (2.0 * mu) + r * (lambda * stretch), stretch);
}
