// Signed distance to a static collider (negative inside the solid), its gradient (the outward
// normal) and its Hessian. The twin of `Collider::distance` in src/contact/mod.rs (and, for
// grids, of `SignedDistanceGrid::sample` in src/mesh/distance.rs). The importing shader
// declares `sdf_values`, the samples of every grid.
//
// Packing (`GpuCollider` in src/backend/gpu/gather.rs):
//   plane   a = (unit normal, offset / |normal|)
//   sphere  a = (center, radius)
//   cuboid  a = (center, 0), b = (half extents, 0)
//   capsule a = (end a, radius), b = (end b, 0)
//   grid    a = (origin, spacing), b.xyz = sample counts (u32 bits), offset = first sample

#import shared/frame

const PLANE: u32 = 0u;
const SPHERE: u32 = 1u;
const CUBOID: u32 = 2u;
const CAPSULE: u32 = 3u;
const GRID: u32 = 4u;

struct Collider {
    a: vec4<f32>,
    b: vec4<f32>,
    kind: u32,
    offset: u32,
    pad_0: u32,
    pad_1: u32,
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

// The trilinear interpolant of a signed-distance grid: value, gradient, and the Hessian of
// its mixed derivatives (the diagonal is zero). Outside the grid the border cell extrapolates.
fn grid_distance(c: Collider, x: vec3<f32>) -> Distance {
    let counts = vec3<u32>(bitcast<u32>(c.b.x), bitcast<u32>(c.b.y), bitcast<u32>(c.b.z));
    let h = c.a.w;
    let g = (x - c.a.xyz) / h;
    let cell = min(vec3<u32>(max(floor(g), vec3<f32>(0.0))), counts - vec3<u32>(2u));
    let f = g - vec3<f32>(cell);
    var phi = 0.0;
    var gradient = vec3<f32>(0.0);
    var xy = 0.0;
    var xz = 0.0;
    var yz = 0.0;
    for (var corner = 0u; corner < 8u; corner++) {
        let b = vec3<u32>(corner & 1u, (corner >> 1u) & 1u, (corner >> 2u) & 1u);
        let at = cell + b;
        let v = sdf_values[c.offset + at.x + counts.x * (at.y + counts.y * at.z)];
        let upper = vec3<f32>(b) == vec3<f32>(1.0);
        let w = select(vec3<f32>(1.0) - f, f, upper);
        let dw = select(vec3<f32>(-1.0), vec3<f32>(1.0), upper) / h;
        phi += w.x * w.y * w.z * v;
        gradient += vec3<f32>(dw.x * w.y * w.z, w.x * dw.y * w.z, w.x * w.y * dw.z) * v;
        xy += dw.x * dw.y * w.z * v;
        xz += dw.x * w.y * dw.z * v;
        yz += w.x * dw.y * dw.z * v;
    }
    let hessian = mat3x3<f32>(vec3<f32>(0.0, xy, xz), vec3<f32>(xy, 0.0, yz), vec3<f32>(xz, yz, 0.0));
    return Distance(phi, gradient, hessian);
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
        case GRID: {
            return grid_distance(c, x);
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

// The collider `c` as the part frame `f` sees it: the host packs each collider per part,
// moved by minus the part's offset (`GpuCollider::pack`).
fn part_collider(f: PartFrame, c: u32) -> Collider {
    return colliders[f.part * params.collider_count + c];
}

// The largest magnitude among v's components.
fn largest(v: vec3<f32>) -> f32 {
    return max(abs(v.x), max(abs(v.y), abs(v.z)));
}

// The size of the numbers a collider's distance is formed from, besides the point's: what its
// rounding scales with (a plane's offset; a centre, ends or origin; half extents, a radius, a
// grid's spacing).
fn collider_scale(c: Collider) -> f32 {
    var scale = abs(c.a.w);
    if (c.kind != PLANE) {
        scale = max(scale, largest(c.a.xyz));
    }
    if (c.kind == CUBOID || c.kind == CAPSULE) {
        scale = max(scale, largest(c.b.xyz));
    }
    return scale;
}

// A vertex this close to a collider rests on it (the projection model): the CPU twin's
// `RESTING_GAP` of 1e-9 m, or a few f32 roundings of the world position, as the CPU twin
// counts them (`contact::resting_gap`), so that the twins agree on who rests.
const RESTING_GAP: f32 = 1e-9;
const RESTING_ROUNDINGS: f32 = 4.0;

fn resting_gap(x: vec3<f32>) -> f32 {
    return max(RESTING_GAP, RESTING_ROUNDINGS * 1.1920929e-7 * largest(x));
}

// The distance to the collider `c` (as the part frame `f` sees it, `part_collider`) from the
// point z of the part's axes, its normal and Hessian in those axes: measured from the part's
// offset, so that f32 rounds the point as finely as z.
fn distance_in(c: Collider, f: PartFrame, z: vec3<f32>) -> Distance {
    let d = collider_distance(c, turned(f.turn, z));
    return Distance(d.phi, unturned(f.turn, d.normal), unturned_matrix(f.turn, d.hessian));
}

// The outward unit normal (w = 1), in the part's axes, of the first collider that the point z
// of part frame f rests on, or w = 0. The importing shader declares `colliders` and
// `collider_count` in its parameters.
fn resting_normal(f: PartFrame, z: vec3<f32>) -> vec4<f32> {
    let x = turned(f.turn, z);
    let gap = resting_gap(f.offset + x);
    for (var c = 0u; c < params.collider_count; c++) {
        let d = collider_distance(part_collider(f, c), x);
        if (d.phi <= gap) {
            return vec4<f32>(unturned(f.turn, normalize(d.normal)), 1.0);
        }
    }
    return vec4<f32>(0.0);
}
