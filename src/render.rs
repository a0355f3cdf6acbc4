//! Drawing a simulation's surface with wgpu: the renderer behind `lively view` (a window) and
//! `lively render` (a PNG), and an example of drawing the GPU backend's position buffer
//! without a readback (`shaders/render.wgsl`).

use glam::{Mat4, Vec3};

use crate::error::{Error, Result};

/// An orbit camera: it looks at `target` from `distance` away, turned by `yaw` about the
/// vertical and raised by `pitch` (radians).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Camera {
    pub target: Vec3,
    pub yaw: f32,
    pub pitch: f32,
    pub distance: f32,
}

/// Vertical field of view.
const FOV_Y: f32 = std::f32::consts::FRAC_PI_4;

impl Camera {
    /// A camera that frames `positions` (their bounding sphere) from the front, a little above.
    pub fn framing(positions: &[[f64; 3]]) -> Camera {
        let (lo, hi) = positions.iter().fold((Vec3::INFINITY, Vec3::NEG_INFINITY), |(lo, hi), p| {
            let p = Vec3::new(p[0] as f32, p[1] as f32, p[2] as f32);
            (lo.min(p), hi.max(p))
        });
        let (target, radius) =
            if lo.x.is_finite() { ((lo + hi) / 2.0, (hi - lo).length() / 2.0) } else { (Vec3::ZERO, 1.0) };
        Camera { target, yaw: 0.5, pitch: 0.35, distance: 1.05 * radius.max(1e-3) / (FOV_Y / 2.0).sin() }
    }

    /// Where the camera is.
    pub fn eye(&self) -> Vec3 {
        let direction =
            Vec3::new(self.pitch.cos() * self.yaw.sin(), self.pitch.sin(), self.pitch.cos() * self.yaw.cos());
        self.target + direction * self.distance
    }

    /// Clip-space transform for an image of `aspect` (width / height).
    pub fn view_projection(&self, aspect: f32) -> Mat4 {
        let near = self.distance * 1e-2;
        // wgpu's clip space is Direct3D's: y up, depth in [0, 1].
        let projection =
            glam::camera::rh::proj::directx::perspective(FOV_Y, aspect, near, self.distance * 1e2);
        projection * glam::camera::rh::view::look_at_mat4(self.eye(), self.target, Vec3::Y)
    }

    /// Turns the camera by `(dx, dy)` radians, the pitch kept short of the poles.
    pub fn orbit(&mut self, dx: f32, dy: f32) {
        self.yaw -= dx;
        self.pitch = (self.pitch + dy).clamp(-1.5, 1.5);
    }

    /// The ray through a point of the image, in normalized device coordinates (x right, y up,
    /// both in [-1, 1]): origin and unit direction.
    pub fn ray(&self, aspect: f32, ndc: [f32; 2]) -> (Vec3, Vec3) {
        let inverse = self.view_projection(aspect).inverse();
        let near = inverse.project_point3(Vec3::new(ndc[0], ndc[1], 0.0));
        let far = inverse.project_point3(Vec3::new(ndc[0], ndc[1], 1.0));
        (near, (far - near).normalize())
    }
}

/// The colour target format of off-screen images (PNG's byte order and gamma).
pub const IMAGE_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8UnormSrgb;
const DEPTH_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Depth32Float;
// Linear values: a dark slate once the sRGB target encodes them.
const BACKGROUND: wgpu::Color = wgpu::Color { r: 0.02, g: 0.025, b: 0.035, a: 1.0 };

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct CameraUniform {
    view_projection: [f32; 16],
    eye: [f32; 4],
}

/// A surface renderer on one device: draws the triangles of a fixed topology at positions
/// read from a storage buffer (3 f32 per vertex).
pub struct Renderer {
    pipeline: wgpu::RenderPipeline,
    layout: wgpu::BindGroupLayout,
    camera: wgpu::Buffer,
    indices: wgpu::Buffer,
    index_count: u32,
    /// Positions uploaded from the host (`upload`), for the CPU backend.
    uploaded: wgpu::Buffer,
    depth: Option<(wgpu::TextureView, [u32; 2])>,
    format: wgpu::TextureFormat,
    body_color: wgpu::Buffer,
    /// Fixed surfaces drawn behind the body: the colliders.
    scenery: Option<Scenery>,
}

/// A static surface: positions, triangles and its colour, on the device.
struct Scenery {
    positions: wgpu::Buffer,
    indices: wgpu::Buffer,
    index_count: u32,
    color: wgpu::Buffer,
}

/// Linear RGB of the body and of the colliders.
const BODY_COLOR: [f32; 4] = [0.86, 0.45, 0.22, 1.0];
const SCENERY_COLOR: [f32; 4] = [0.32, 0.36, 0.42, 1.0];

impl Renderer {
    /// A renderer of `triangles` over `vertex_count` vertices into targets of `format`.
    pub fn new(
        device: &wgpu::Device,
        format: wgpu::TextureFormat,
        triangles: &[[u32; 3]],
        vertex_count: usize,
    ) -> Result<Renderer> {
        use wgpu::util::DeviceExt;
        if !matches!(
            format.remove_srgb_suffix(),
            wgpu::TextureFormat::Rgba8Unorm | wgpu::TextureFormat::Bgra8Unorm
        ) {
            return Err(Error::Unsupported(format!(
                "the renderer draws into 8-bit RGBA or BGRA targets, not {format:?}"
            )));
        }
        if let Some(t) = triangles.iter().find(|t| t.iter().any(|&v| v as usize >= vertex_count)) {
            return Err(Error::Mesh(format!(
                "triangle {t:?} refers to a vertex past the {vertex_count} drawn"
            )));
        }
        let (source, _, _) = crate::backend::gpu::shaders::module(
            "render",
            crate::backend::gpu::shaders::Reductions::Tree,
            false,
        )?;
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("render"),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let entry = |binding, ty| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::VERTEX_FRAGMENT,
            ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("render"),
            entries: &[
                entry(0, wgpu::BufferBindingType::Uniform),
                entry(1, wgpu::BufferBindingType::Storage { read_only: true }),
                entry(2, wgpu::BufferBindingType::Uniform),
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("render"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
            label: Some("render"),
            layout: Some(&pipeline_layout),
            vertex: wgpu::VertexState {
                module: &module,
                entry_point: Some("vertex"),
                compilation_options: Default::default(),
                buffers: &[],
            },
            // Both faces: a cloth has two sides, and a body seen from inside still shows.
            primitive: wgpu::PrimitiveState { cull_mode: None, ..Default::default() },
            depth_stencil: Some(wgpu::DepthStencilState {
                format: DEPTH_FORMAT,
                depth_write_enabled: Some(true),
                depth_compare: Some(wgpu::CompareFunction::Less),
                stencil: Default::default(),
                bias: Default::default(),
            }),
            multisample: Default::default(),
            fragment: Some(wgpu::FragmentState {
                module: &module,
                entry_point: Some("fragment"),
                compilation_options: Default::default(),
                targets: &[Some(format.into())],
            }),
            multiview_mask: None,
            cache: None,
        });
        let camera = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("camera"),
            size: std::mem::size_of::<CameraUniform>() as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let flat: Vec<u32> = triangles.as_flattened().to_vec();
        let indices = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("surface"),
            contents: bytemuck::cast_slice(if flat.is_empty() { &[0u32; 3][..] } else { &flat }),
            usage: wgpu::BufferUsages::INDEX,
        });
        let uploaded = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("positions"),
            size: (12 * vertex_count.max(1)) as u64,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let body_color = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("body colour"),
            contents: bytemuck::cast_slice(&BODY_COLOR),
            usage: wgpu::BufferUsages::UNIFORM,
        });
        Ok(Renderer {
            pipeline,
            layout,
            camera,
            indices,
            index_count: flat.len() as u32,
            uploaded,
            depth: None,
            format,
            body_color,
            scenery: None,
        })
    }

    /// Fixed surfaces to draw with every frame, in the colliders' colour (such as
    /// [`collider_surfaces`]); an empty list draws none.
    pub fn set_scenery(&mut self, device: &wgpu::Device, surfaces: &[crate::TriMesh]) {
        use wgpu::util::DeviceExt;
        let (mut positions, mut indices) = (Vec::<f32>::new(), Vec::<u32>::new());
        for surface in surfaces {
            let base = (positions.len() / 3) as u32;
            positions.extend(surface.positions().as_flattened().iter().map(|&c| c as f32));
            indices.extend(surface.triangles().as_flattened().iter().map(|&v| base + v));
        }
        if indices.is_empty() {
            self.scenery = None;
            return;
        }
        let buffer = |label, contents: &[u8], usage| {
            device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents,
                usage,
            })
        };
        self.scenery = Some(Scenery {
            positions: buffer("scenery", bytemuck::cast_slice(&positions), wgpu::BufferUsages::STORAGE),
            indices: buffer("scenery triangles", bytemuck::cast_slice(&indices), wgpu::BufferUsages::INDEX),
            index_count: indices.len() as u32,
            color: buffer(
                "scenery colour",
                bytemuck::cast_slice(&SCENERY_COLOR),
                wgpu::BufferUsages::UNIFORM,
            ),
        });
    }

    /// Copies host positions into the renderer's own buffer (the CPU backend's path).
    pub fn upload(&self, queue: &wgpu::Queue, positions: &[[f64; 3]]) {
        let data: Vec<f32> = positions.as_flattened().iter().map(|&c| c as f32).collect();
        queue.write_buffer(&self.uploaded, 0, bytemuck::cast_slice(&data));
    }

    /// Records a frame into `target` (of `size` pixels): the surface at `positions` (a device
    /// buffer of 3 f32 per vertex, such as `Simulation::gpu_positions`), or at the uploaded
    /// positions when `None`.
    #[allow(clippy::too_many_arguments)]
    pub fn draw(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        encoder: &mut wgpu::CommandEncoder,
        target: &wgpu::TextureView,
        size: [u32; 2],
        camera: &Camera,
        positions: Option<&wgpu::Buffer>,
    ) {
        let aspect = size[0] as f32 / size[1].max(1) as f32;
        let uniform = CameraUniform {
            view_projection: camera.view_projection(aspect).to_cols_array(),
            eye: camera.eye().extend(1.0).to_array(),
        };
        queue.write_buffer(&self.camera, 0, bytemuck::bytes_of(&uniform));
        if self.depth.as_ref().is_none_or(|(_, s)| *s != size) {
            let texture = device.create_texture(&wgpu::TextureDescriptor {
                label: Some("depth"),
                size: wgpu::Extent3d { width: size[0], height: size[1], depth_or_array_layers: 1 },
                mip_level_count: 1,
                sample_count: 1,
                dimension: wgpu::TextureDimension::D2,
                format: DEPTH_FORMAT,
                usage: wgpu::TextureUsages::RENDER_ATTACHMENT,
                view_formats: &[],
            });
            self.depth = Some((texture.create_view(&Default::default()), size));
        }
        let bind = |positions: &wgpu::Buffer, color: &wgpu::Buffer| {
            device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("render"),
                layout: &self.layout,
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: self.camera.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: positions.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 2, resource: color.as_entire_binding() },
                ],
            })
        };
        let body = bind(positions.unwrap_or(&self.uploaded), &self.body_color);
        let scenery = self.scenery.as_ref().map(|s| (bind(&s.positions, &s.color), s));
        let depth = &self.depth.as_ref().expect("made above").0;
        let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("surface"),
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view: target,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations { load: wgpu::LoadOp::Clear(BACKGROUND), store: wgpu::StoreOp::Store },
            })],
            depth_stencil_attachment: Some(wgpu::RenderPassDepthStencilAttachment {
                view: depth,
                depth_ops: Some(wgpu::Operations {
                    load: wgpu::LoadOp::Clear(1.0),
                    store: wgpu::StoreOp::Discard,
                }),
                stencil_ops: None,
            }),
            timestamp_writes: None,
            occlusion_query_set: None,
            multiview_mask: None,
        });
        pass.set_pipeline(&self.pipeline);
        if let Some((group, scenery)) = &scenery {
            pass.set_bind_group(0, group, &[]);
            pass.set_index_buffer(scenery.indices.slice(..), wgpu::IndexFormat::Uint32);
            pass.draw_indexed(0..scenery.index_count, 0, 0..1);
        }
        pass.set_bind_group(0, &body, &[]);
        pass.set_index_buffer(self.indices.slice(..), wgpu::IndexFormat::Uint32);
        pass.draw_indexed(0..self.index_count, 0, 0..1);
    }

    /// Draws into an off-screen image of the renderer's format and reads it back:
    /// `size[0] * size[1]` RGBA pixels, rows top to bottom.
    pub fn image(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        size: [u32; 2],
        camera: &Camera,
        positions: Option<&wgpu::Buffer>,
    ) -> Result<Vec<u8>> {
        let extent = wgpu::Extent3d { width: size[0], height: size[1], depth_or_array_layers: 1 };
        let texture = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("image"),
            size: extent,
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: self.format,
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
            view_formats: &[],
        });
        // Rows are padded to the copy alignment, then unpadded.
        let row = 4 * size[0];
        let padded = row.div_ceil(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT) * wgpu::COPY_BYTES_PER_ROW_ALIGNMENT;
        let staging = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("image readback"),
            size: (padded * size[1]) as u64,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder =
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("image") });
        self.draw(
            device,
            queue,
            &mut encoder,
            &texture.create_view(&Default::default()),
            size,
            camera,
            positions,
        );
        encoder.copy_texture_to_buffer(
            wgpu::TexelCopyTextureInfo {
                texture: &texture,
                mip_level: 0,
                origin: wgpu::Origin3d::ZERO,
                aspect: wgpu::TextureAspect::All,
            },
            wgpu::TexelCopyBufferInfo {
                buffer: &staging,
                layout: wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(padded),
                    rows_per_image: Some(size[1]),
                },
            },
            extent,
        );
        queue.submit([encoder.finish()]);
        let bytes = crate::backend::gpu::context::read_mapped(device, &staging, (padded * size[1]) as u64)?;
        let mut rgba: Vec<u8> =
            bytes.chunks_exact(padded as usize).flat_map(|r| &r[..row as usize]).copied().collect();
        if self.format.remove_srgb_suffix() == wgpu::TextureFormat::Bgra8Unorm {
            rgba.chunks_exact_mut(4).for_each(|pixel| pixel.swap(0, 2));
        }
        Ok(rgba)
    }
}

/// Surfaces that show a simulation's colliders: spheres, boxes and capsules as they are, planes
/// as a square around `focus` of side `extent` (a grid collider shows nothing: its surface is
/// not kept).
pub fn collider_surfaces(colliders: &[crate::Collider], focus: [f64; 3], extent: f64) -> Vec<crate::TriMesh> {
    use glam::DVec3;
    colliders
        .iter()
        .filter_map(|collider| match &collider.shape {
            crate::Shape::Plane { normal, offset } => {
                let n = DVec3::from(*normal).normalize();
                let on_plane = DVec3::from(focus)
                    - n * (n.dot(DVec3::from(focus)) - offset / DVec3::from(*normal).length());
                let u = n.any_orthonormal_vector();
                let v = n.cross(u);
                let corners = [(-1.0, -1.0), (1.0, -1.0), (1.0, 1.0), (-1.0, 1.0)]
                    .map(|(s, t)| (on_plane + (u * s + v * t) * extent).to_array())
                    .to_vec();
                crate::TriMesh::new(corners, vec![[0, 1, 2], [0, 2, 3]]).ok()
            }
            shape => bounded_surface(shape),
        })
        .collect()
}

/// The surface of a bounded collider shape (sphere, box, capsule); `None` for a plane or a
/// grid.
fn bounded_surface(shape: &crate::Shape) -> Option<crate::TriMesh> {
    use crate::Shape;
    use glam::DVec3;
    match shape {
        Shape::Sphere { center, radius } => crate::TriMesh::sphere(*center, *radius, 3).ok(),
        Shape::Cuboid { center, half_extents } => {
            let (center, half) = (DVec3::from(*center), DVec3::from(*half_extents));
            let sign = |bit: usize| if bit == 1 { 1.0 } else { -1.0 };
            let corners = (0..8)
                .map(|b| {
                    (center + DVec3::new(sign(b & 1), sign((b >> 1) & 1), sign(b >> 2)) * half).to_array()
                })
                .collect();
            let quads = [[0, 2, 3, 1], [4, 5, 7, 6], [0, 1, 5, 4], [2, 6, 7, 3], [0, 4, 6, 2], [1, 3, 7, 5]];
            let triangles = quads.iter().flat_map(|q| [[q[0], q[1], q[2]], [q[0], q[2], q[3]]]).collect();
            crate::TriMesh::new(corners, triangles).ok()
        }
        Shape::Capsule { a, b, radius } => {
            // A sphere split at its equator across the axis, the halves moved to the ends.
            let (a, b) = (DVec3::from(*a), DVec3::from(*b));
            let ball = crate::TriMesh::sphere([0.0; 3], *radius, 3).ok()?;
            let axis = (b - a).normalize_or_zero();
            let moved = ball
                .positions()
                .iter()
                .map(|p| {
                    let p = DVec3::from(*p);
                    (p + if p.dot(axis) >= 0.0 { b } else { a }).to_array()
                })
                .collect();
            crate::TriMesh::new(moved, ball.triangles().to_vec()).ok()
        }
        Shape::Plane { .. } | Shape::Sdf { .. } => None,
    }
}

/// Writes RGBA pixels (rows top to bottom) as a PNG.
pub fn save_png(path: impl AsRef<std::path::Path>, size: [u32; 2], rgba: &[u8]) -> Result<()> {
    let path = path.as_ref();
    let io = |e: std::io::Error| Error::Io { path: path.display().to_string(), source: e };
    let file = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    let mut encoder = png::Encoder::new(file, size[0], size[1]);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    let encoding = |e: png::EncodingError| Error::Io {
        path: path.display().to_string(),
        source: std::io::Error::other(e),
    };
    encoder.write_header().map_err(encoding)?.write_image_data(rgba).map_err(encoding)?;
    Ok(())
}

/// Draws `sim` as it is now into a PNG at `out`, seen by the camera that frames its rest shape.
pub fn render_frame(sim: &crate::Simulation, size: [u32; 2], out: impl AsRef<std::path::Path>) -> Result<()> {
    if size[0] == 0 || size[1] == 0 || size[0] > 8192 || size[1] > 8192 {
        return Err(Error::Parameter(format!(
            "image size {}x{} must be 1..=8192 on each side",
            size[0], size[1]
        )));
    }
    let camera = scene_camera(sim);
    let context = crate::backend::gpu::GpuContext::new()?;
    let mut renderer = Renderer::new(
        &context.device,
        IMAGE_FORMAT,
        &sim.model().surface_triangles(),
        sim.positions().len(),
    )?;
    renderer.set_scenery(&context.device, &scenery(sim));
    renderer.upload(&context.queue, sim.positions());
    let rgba = renderer.image(&context.device, &context.queue, size, &camera, None)?;
    save_png(out, size, &rgba)
}

/// The colliders' surfaces around a simulation's rest shape.
pub fn scenery(sim: &crate::Simulation) -> Vec<crate::TriMesh> {
    let camera = Camera::framing(sim.model().rest_positions());
    collider_surfaces(sim.colliders(), camera.target.as_dvec3().to_array(), 2.0 * camera.distance as f64)
}

/// A camera that frames a simulation's rest shape and its bounded colliders (planes and grids
/// left out): the body stays in view wherever it falls onto them.
pub fn scene_camera(sim: &crate::Simulation) -> Camera {
    let mut points = sim.model().rest_positions().to_vec();
    for surface in sim.colliders().iter().filter_map(|c| bounded_surface(&c.shape)) {
        points.extend_from_slice(surface.positions());
    }
    Camera::framing(&points)
}
