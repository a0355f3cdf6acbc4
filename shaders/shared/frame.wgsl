// Where a vertex's displacement is measured from (gpu/buffers.rs, `Frame`): vertex v of part p,
// with rest position X (about the part's own centre, in the `rest` buffer) and displacement u,
// lies at c_p + R_p (X + u). The displacements are in the part's own axes, so that a part that
// turns as a whole keeps them small: every stage of the elements, inertia and the solves sees
// X + u alone (they are the same in any axes); gravity, colliders and handles, which live in
// the world's, go through the frame: turned into the part's axes, and placed from the part's
// offset (the host moves the colliders and handles by minus it, in f64, so that no position of
// the world's size is rounded here). Per part, `frame_offsets` holds (c_p, the part's reach)
// and then R_p as a unit quaternion (xyz, w). The importer declares `frame_offsets` and
// `frame_parts`.

struct PartFrame {
    offset: vec3<f32>,
    reach: f32,
    turn: vec4<f32>,
    part: u32,
}

fn part_frame(v: u32) -> PartFrame {
    let p = frame_parts[v];
    let first = frame_offsets[2u * p];
    return PartFrame(first.xyz, first.w, frame_offsets[2u * p + 1u], p);
}

// R a for the unit quaternion q (exactly a for the identity).
fn turned(q: vec4<f32>, a: vec3<f32>) -> vec3<f32> {
    return a + cross(q.xyz, cross(q.xyz, a) + a * q.w) * 2.0;
}

// R^T a.
fn unturned(q: vec4<f32>, a: vec3<f32>) -> vec3<f32> {
    return turned(vec4<f32>(-q.xyz, q.w), a);
}

// R^T m R: a world matrix in the part's axes.
fn unturned_matrix(q: vec4<f32>, m: mat3x3<f32>) -> mat3x3<f32> {
    let r = mat3x3<f32>(turned(q, vec3<f32>(1.0, 0.0, 0.0)), turned(q, vec3<f32>(0.0, 1.0, 0.0)), turned(q, vec3<f32>(0.0, 0.0, 1.0)));
    return transpose(r) * m * r;
}
