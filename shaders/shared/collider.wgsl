// Signed distance to a static collider (negative inside the solid), its gradient (the outward
// normal) and its Hessian. The twin of `Collider::distance` in src/contact/mod.rs.
//
// Packing (`GpuCollider` in src/backend/gpu/linear.rs):
//   plane   a = (unit normal, offset / |normal|)
//   sphere  a = (center, radius)
//   cuboid  a = (center, 0), b = (half extents, 0)
//   capsule a = (end a, radius), b = (end b, 0)

const PLANE: u32 = 0u;
const SPHERE: u32 = 1u;
const CUBOID: u32 = 2u;
const CAPSULE: u32 = 3u;

struct Collider {
    a: vec4<f32>,
    b: vec4<f32>,
    kind: u32,
    pad_0: u32,
    pad_1: u32,
    pad_2: u32,
}

struct Distance {
    phi: f32,
    normal: vec3<f32>,
    hessian: mat3x3<f32>,
}

fn outer3(u: vec3<f32>, v: vec3<f32>) -> mat3x3<f32> {
    return mat3x3<f32>(u * v.x, u * v.y, u * v.z);
}

const IDENTITY3 = mat3x3<f32>(vec3<f32>(1.0, 0.0, 0.0), vec3<f32>(0.0, 1.0, 0.0), vec3<f32>(0.0, 0.0, 1.0));

// Distance to the point `center` (the axis term removed for a distance to a line).
fn distance_to_point(x: vec3<f32>, center: vec3<f32>, radius: f32, axis: vec3<f32>) -> Distance {
    let d = x - center;
    let rho = length(d);
    if (rho <= 0.0) {
        return Distance(-radius, vec3<f32>(0.0, 1.0, 0.0), mat3x3<f32>());
    }
    let n = d / rho;
    let curvature = (IDENTITY3 - outer3(n, n) - outer3(axis, axis)) * (1.0 / rho);
    return Distance(rho - radius, n, curvature);
}

fn collider_distance(c: Collider, x: vec3<f32>) -> Distance {
    switch c.kind {
        case PLANE: {
            return Distance(dot(c.a.xyz, x) - c.a.w, c.a.xyz, mat3x3<f32>());
        }
        case SPHERE: {
            return distance_to_point(x, c.a.xyz, c.a.w, vec3<f32>(0.0));
        }
        case CUBOID: {
            let d = x - c.a.xyz;
            let q = abs(d) - c.b.xyz;
            if (max(q.x, max(q.y, q.z)) <= 0.0) {
                // Inside: the nearest face decides.
                var axis = 2u;
                if (q.x >= q.y && q.x >= q.z) {
                    axis = 0u;
                } else if (q.y >= q.z) {
                    axis = 1u;
                }
                var n = vec3<f32>(0.0);
                n[axis] = select(-1.0, 1.0, d[axis] >= 0.0);
                return Distance(q[axis], n, mat3x3<f32>());
            }
            let outside = max(q, vec3<f32>(0.0)) * sign(d);
            return Distance(length(outside), normalize(outside), mat3x3<f32>());
        }
        default: {
            let axis = c.b.xyz - c.a.xyz;
            let length2 = dot(axis, axis);
            var t = 0.0;
            if (length2 > 0.0) {
                t = clamp(dot(x - c.a.xyz, axis) / length2, 0.0, 1.0);
            }
            var along = vec3<f32>(0.0);
            if (t > 0.0 && t < 1.0) {
                along = axis * inverseSqrt(length2);
            }
            return distance_to_point(x, c.a.xyz + axis * t, c.a.w, along);
        }
    }
}
