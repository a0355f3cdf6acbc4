// Spring energies of the edge vector d = x_j - x_i: the twins of src/material/spring.rs.

const HOOKE: u32 = 0u;
const STVK_SPRING: u32 = 1u;

struct SpringLaw {
    kind: u32,
    stiffness: f32,
    rest: f32,
}

fn spring_law(packed: vec4<f32>) -> SpringLaw {
    return SpringLaw(u32(packed.x), packed.y, packed.z);
}

fn spring_energy(d: vec3<f32>, s: SpringLaw) -> f32 {
    if (s.kind == HOOKE) {
        let stretch = length(d) - s.rest;
        return 0.5 * s.stiffness * stretch * stretch;
    }
    let q = dot(d, d) - s.rest * s.rest;
    return 0.5 * s.stiffness * q * q;
}

fn spring_gradient(d: vec3<f32>, s: SpringLaw) -> vec3<f32> {
    if (s.kind == HOOKE) {
        let len = length(d);
        if (len <= 1e-30) {
            return vec3<f32>(0.0);
        }
        return d * (s.stiffness * (len - s.rest) / len);
    }
    return d * (2.0 * s.stiffness * (dot(d, d) - s.rest * s.rest));
}

// d2E/dd2 = along d dd^T / |d|^2 + across (I - dd^T / |d|^2); with `project`, negative
// eigenvalues replaced by their magnitudes.
fn spring_hessian(d: vec3<f32>, s: SpringLaw, project: bool) -> mat3x3<f32> {
    let len2 = dot(d, d);
    var along: f32;
    var across: f32;
    if (s.kind == HOOKE) {
        let len = sqrt(len2);
        along = s.stiffness;
        across = select(0.0, s.stiffness * (1.0 - s.rest / len), len > 1e-30);
    } else {
        let r2 = s.rest * s.rest;
        along = 2.0 * s.stiffness * (3.0 * len2 - r2);
        across = 2.0 * s.stiffness * (len2 - r2);
    }
    if (project) {
        along = abs(along);
        across = abs(across);
    }
    var dd = mat3x3<f32>(vec3<f32>(0.0), vec3<f32>(0.0), vec3<f32>(0.0));
    if (len2 > 1e-30) {
        dd = mat3x3<f32>(d * d.x, d * d.y, d * d.z) * (1.0 / len2);
    }
    let identity = mat3x3<f32>(vec3<f32>(1.0, 0.0, 0.0), vec3<f32>(0.0, 1.0, 0.0), vec3<f32>(0.0, 0.0, 1.0));
    return dd * along + (identity - dd) * across;
}
