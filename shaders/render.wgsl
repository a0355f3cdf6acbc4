// Drawing a body's surface: the renderer of `lively view` and `lively render` (src/render.rs).
// Positions come straight from a storage buffer of 3 f32 per vertex — the simulation's own
// device buffer on the GPU backend — indexed by the surface triangles; the normal is the
// triangle's, from screen-space derivatives, so nothing but positions is needed.

struct Camera {
    view_projection: mat4x4<f32>,
    eye: vec4<f32>,
}

@group(0) @binding(0) var<uniform> camera: Camera;
@group(0) @binding(1) var<storage, read> positions: array<f32>;
// The surface's colour: the body's, or the colliders' (rgb; a unused).
@group(0) @binding(2) var<uniform> base_color: vec4<f32>;

struct Varyings {
    @builtin(position) clip: vec4<f32>,
    @location(0) world: vec3<f32>,
}

@vertex
fn vertex(@builtin(vertex_index) v: u32) -> Varyings {
    let p = vec3<f32>(positions[3u * v], positions[3u * v + 1u], positions[3u * v + 2u]);
    return Varyings(camera.view_projection * vec4<f32>(p, 1.0), p);
}

const KEY_LIGHT = vec3<f32>(0.35, 0.85, 0.4);

@fragment
fn fragment(in: Varyings) -> @location(0) vec4<f32> {
    var n = normalize(cross(dpdx(in.world), dpdy(in.world)));
    // Both sides of a cloth are lit: the normal faces the eye.
    let to_eye = normalize(camera.eye.xyz - in.world);
    if (dot(n, to_eye) < 0.0) {
        n = -n;
    }
    let diffuse = max(dot(n, normalize(KEY_LIGHT)), 0.0);
    let rim = pow(1.0 - max(dot(n, to_eye), 0.0), 3.0);
    let color = base_color.rgb * (0.28 + 0.72 * diffuse) + vec3<f32>(0.15) * rim;
    return vec4<f32>(color, 1.0);
}
