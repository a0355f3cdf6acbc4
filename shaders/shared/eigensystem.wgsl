// The signed SVD and the analytic eigensystem of dP/dF for isotropic models: the twins of
// src/math.rs (symmetric_eigen3, signed_svd) and of the stretch forms in
// src/material/isotropic.rs.

#import shared/material

const COROTATED: u32 = 3u;
const FIXED_COROTATED: u32 = 4u;
const ARAP: u32 = 5u;

struct Eigen3 {
    values: vec3<f32>,
    vectors: mat3x3<f32>,
}

// A cyclic Jacobi solve of a symmetric 3x3 matrix as it goes: the diagonal, the off-diagonal
// entries (`off[k]` the one outside row and column k) and the rotations so far (columns).
struct Jacobi {
    diagonal: vec3<f32>,
    off: vec3<f32>,
    vectors: mat3x3<f32>,
}

// The rotation in the (0, 1) plane that zeroes off[2], as src/math.rs forms it. The other
// planes are this one in permuted coordinates: no index is dynamic, which would put the
// matrices in local memory.
fn rotate01(j: Jacobi) -> Jacobi {
    let apq = j.off.z;
    if (apq == 0.0) {
        return j;
    }
    let theta = (j.diagonal.y - j.diagonal.x) / (2.0 * apq);
    var t = sign(theta) / (abs(theta) + sqrt(theta * theta + 1.0));
    if (theta == 0.0) {
        t = 1.0;
    }
    let c = 1.0 / sqrt(t * t + 1.0);
    let s = t * c;
    // a_20 is off[1], a_21 is off[0].
    let a20 = j.off.y;
    let a21 = j.off.x;
    let v = j.vectors;
    return Jacobi(
        vec3<f32>(j.diagonal.x - t * apq, j.diagonal.y + t * apq, j.diagonal.z),
        vec3<f32>(s * a20 + c * a21, c * a20 - s * a21, 0.0),
        mat3x3<f32>(c * v[0] - s * v[1], s * v[0] + c * v[1], v[2]),
    );
}

// Indices 1 and 2 swapped (its own inverse).
fn swap12(j: Jacobi) -> Jacobi {
    return Jacobi(j.diagonal.xzy, j.off.xzy, mat3x3<f32>(j.vectors[0], j.vectors[2], j.vectors[1]));
}

// Indices (1, 2, 0) as (0, 1, 2), and back.
fn cycle(j: Jacobi) -> Jacobi {
    return Jacobi(j.diagonal.yzx, j.off.yzx, mat3x3<f32>(j.vectors[1], j.vectors[2], j.vectors[0]));
}

fn uncycle(j: Jacobi) -> Jacobi {
    return Jacobi(j.diagonal.zxy, j.off.zxy, mat3x3<f32>(j.vectors[2], j.vectors[0], j.vectors[1]));
}

// Cyclic Jacobi on a symmetric 3x3 matrix (the twin of src/math.rs), sweeping the planes
// (0, 1), (0, 2), (1, 2) until the off-diagonal entries are at f32 round-off of the largest
// entry (at most 12 sweeps, where it always took 12); eigenvalues descending, vectors a
// rotation.
fn symmetric_eigen3(m: mat3x3<f32>) -> Eigen3 {
    var j = Jacobi(vec3<f32>(m[0][0], m[1][1], m[2][2]), vec3<f32>(m[2][1], m[2][0], m[1][0]), identity3());
    // Largest entries, not squares: a stiff material's entries squared would overflow f32.
    let entries = max(max(abs(m[0]), abs(m[1])), abs(m[2]));
    let round_off = 1.1920929e-7 * max(max(entries.x, entries.y), entries.z);
    for (var sweep = 0u; sweep < 12u; sweep++) {
        let off = abs(j.off);
        if (max(max(off.x, off.y), off.z) <= round_off) {
            break;
        }
        j = rotate01(j);
        j = swap12(rotate01(swap12(j)));
        j = uncycle(rotate01(cycle(j)));
    }
    // Sorted descending by three compare-and-swaps, each vector with its value.
    var values = j.diagonal;
    var vectors = j.vectors;
    if (values.y > values.x) {
        values = values.yxz;
        vectors = mat3x3<f32>(vectors[1], vectors[0], vectors[2]);
    }
    if (values.z > values.y) {
        values = values.xzy;
        vectors = mat3x3<f32>(vectors[0], vectors[2], vectors[1]);
    }
    if (values.y > values.x) {
        values = values.yxz;
        vectors = mat3x3<f32>(vectors[1], vectors[0], vectors[2]);
    }
    if (determinant(vectors) < 0.0) {
        vectors[2] = -vectors[2];
    }
    return Eigen3(values, vectors);
}

struct Svd {
    u: mat3x3<f32>,
    s: vec3<f32>,
    v: mat3x3<f32>,
}

fn any_orthogonal(a: vec3<f32>) -> vec3<f32> {
    var helper = vec3<f32>(0.0, 1.0, 0.0);
    if (abs(a.x) < 0.9) {
        helper = vec3<f32>(1.0, 0.0, 0.0);
    }
    return normalize(cross(a, helper));
}

// F = U diag(s) V^T with U, V rotations and s[2] < 0 exactly when det F < 0.
fn signed_svd(f: mat3x3<f32>) -> Svd {
    let v = symmetric_eigen3(transpose(f) * f).vectors;
    let b = f * v;
    let scale = max(max(max(abs(f[0].x), abs(f[0].y)), max(abs(f[0].z), abs(f[1].x))),
        max(max(abs(f[1].y), abs(f[1].z)), max(max(abs(f[2].x), abs(f[2].y)), abs(f[2].z))));
    let tiny = max(1e-30, 1e-6 * scale);
    let n0 = length(b[0]);
    var u0 = vec3<f32>(1.0, 0.0, 0.0);
    if (n0 > tiny) {
        u0 = b[0] / n0;
    }
    let r1 = b[1] - u0 * dot(u0, b[1]);
    let n1 = length(r1);
    var u1 = any_orthogonal(u0);
    if (n1 > tiny) {
        u1 = r1 / n1;
    }
    let u2 = cross(u0, u1);
    return Svd(mat3x3<f32>(u0, u1, u2), vec3<f32>(dot(u0, b[0]), dot(u1, b[1]), dot(u2, b[2])), v);
}

// Derivatives of psi in principal stretches; flip/twist of the pair that excludes index k.
struct Stretch {
    grad: vec3<f32>,
    hess: mat3x3<f32>,
    flip: vec3<f32>,
    twist: vec3<f32>,
}

// (i, j) of the pair that excludes k.
fn pair_of(k: u32) -> vec2<u32> {
    if (k == 0u) {
        return vec2<u32>(1u, 2u);
    }
    if (k == 1u) {
        return vec2<u32>(0u, 2u);
    }
    return vec2<u32>(0u, 1u);
}

// (a + b) kept away from zero, sign preserved (the twist singularity of the rotation family).
fn guarded_sum(a: f32, b: f32) -> f32 {
    let s = a + b;
    if (abs(s) < 1e-6) {
        return select(-1e-6, 1e-6, s >= 0.0);
    }
    return s;
}

fn stretch_energy(s: vec3<f32>, m: Lame) -> f32 {
    let j = s.x * s.y * s.z;
    let d = s - vec3<f32>(1.0);
    if (m.model == FIXED_COROTATED) {
        return m.mu * dot(d, d) + 0.5 * m.lambda * (j - 1.0) * (j - 1.0);
    }
    let l = select(m.lambda, 0.0, m.model == ARAP);
    let t = s.x + s.y + s.z - 3.0;
    if (m.model == COROTATED || m.model == ARAP) {
        return m.mu * dot(d, d) + 0.5 * l * t * t;
    }
    // The polynomial models, for completeness (their F forms are used for energies).
    return energy_density(mat3x3<f32>(vec3<f32>(d.x, 0.0, 0.0), vec3<f32>(0.0, d.y, 0.0), vec3<f32>(0.0, 0.0, d.z)), m);
}

fn stretch_derivatives(s: vec3<f32>, m: Lame) -> Stretch {
    var out: Stretch;
    let mu = m.mu;
    let j = s.x * s.y * s.z;
    let others = vec3<f32>(s.y * s.z, s.x * s.z, s.x * s.y);
    if (m.model == STVK) {
        let c = 0.5 * m.lambda * (dot(s, s) - 3.0) - mu;
        for (var i = 0u; i < 3u; i++) {
            out.grad[i] = mu * s[i] * s[i] * s[i] + c * s[i];
            for (var k = 0u; k < 3u; k++) {
                out.hess[k][i] = m.lambda * s[i] * s[k];
            }
            out.hess[i][i] += 3.0 * mu * s[i] * s[i] + c;
        }
        for (var p = 0u; p < 3u; p++) {
            let ab = pair_of(p);
            let a = s[ab.x];
            let b = s[ab.y];
            out.flip[p] = mu * (a * a + a * b + b * b) + c;
            out.twist[p] = mu * (a * a - a * b + b * b) + c;
        }
    } else if (m.model == NEO_HOOKEAN) {
        let lnj = log(max(j, 1e-30));
        for (var i = 0u; i < 3u; i++) {
            out.grad[i] = mu * s[i] + (m.lambda * lnj - mu) / s[i];
            for (var k = 0u; k < 3u; k++) {
                out.hess[k][i] = m.lambda / (s[i] * s[k]);
            }
            out.hess[i][i] += mu + (mu - m.lambda * lnj) / (s[i] * s[i]);
        }
        for (var p = 0u; p < 3u; p++) {
            let ab = pair_of(p);
            let ss = s[ab.x] * s[ab.y];
            out.flip[p] = mu + (mu - m.lambda * lnj) / ss;
            out.twist[p] = mu + (m.lambda * lnj - mu) / ss;
        }
    } else if (m.model == STABLE_NEO_HOOKEAN) {
        let l = m.lambda + mu;
        let sc = l * (j - 1.0) - mu;
        for (var i = 0u; i < 3u; i++) {
            out.grad[i] = mu * s[i] + sc * others[i];
            for (var k = 0u; k < 3u; k++) {
                if (i == k) {
                    out.hess[k][i] = mu + l * others[i] * others[i];
                } else {
                    out.hess[k][i] = s[3u - i - k] * (l * j + sc);
                }
            }
        }
        out.flip = vec3<f32>(mu) - sc * s;
        out.twist = vec3<f32>(mu) + sc * s;
    } else if (m.model == FIXED_COROTATED) {
        for (var i = 0u; i < 3u; i++) {
            out.grad[i] = 2.0 * mu * (s[i] - 1.0) + m.lambda * (j - 1.0) * others[i];
            for (var k = 0u; k < 3u; k++) {
                if (i == k) {
                    out.hess[k][i] = 2.0 * mu + m.lambda * others[i] * others[i];
                } else {
                    out.hess[k][i] = m.lambda * s[3u - i - k] * (2.0 * j - 1.0);
                }
            }
        }
        for (var p = 0u; p < 3u; p++) {
            let ab = pair_of(p);
            out.flip[p] = 2.0 * mu - m.lambda * (j - 1.0) * s[p];
            out.twist[p] = 2.0 * mu - 4.0 * mu / guarded_sum(s[ab.x], s[ab.y]) + m.lambda * (j - 1.0) * s[p];
        }
    } else {
        // Corotated and ARAP (ARAP has no lambda term).
        let l = select(m.lambda, 0.0, m.model == ARAP);
        let t = s.x + s.y + s.z - 3.0;
        for (var i = 0u; i < 3u; i++) {
            out.grad[i] = 2.0 * mu * (s[i] - 1.0) + l * t;
            for (var k = 0u; k < 3u; k++) {
                out.hess[k][i] = l;
            }
            out.hess[i][i] += 2.0 * mu;
        }
        for (var p = 0u; p < 3u; p++) {
            let ab = pair_of(p);
            out.flip[p] = 2.0 * mu;
            out.twist[p] = 2.0 * mu + (2.0 * l * t - 4.0 * mu) / guarded_sum(s[ab.x], s[ab.y]);
        }
    }
    return out;
}

fn outer3(a: vec3<f32>, b: vec3<f32>) -> mat3x3<f32> {
    return mat3x3<f32>(a * b.x, a * b.y, a * b.z);
}
