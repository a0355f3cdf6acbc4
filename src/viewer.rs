//! `lively view`: a scene in a window (winit), stepped once per frame at its own dt and drawn
//! by [`Renderer`]. On the GPU backend the simulation runs on the window's device and its
//! position buffer is drawn in place, without a readback.
//!
//! Left drag orbits, the wheel zooms, right drag pulls the nearest vertex through a handle.
//! Space pauses, S (or the right arrow) steps once while paused, R resets, I switches to the
//! next integrator, Escape quits.

use std::path::PathBuf;
use std::sync::Arc;

use glam::Vec3;
use winit::application::ApplicationHandler;
use winit::event::{ElementState, MouseButton, MouseScrollDelta, WindowEvent};
use winit::event_loop::{ActiveEventLoop, EventLoop};
use winit::keyboard::{Key, NamedKey};
use winit::window::{Window, WindowId};

use crate::backend::gpu::GpuContext;
use crate::error::{Error, Result};
use crate::render::{Camera, Renderer};
use crate::scene::Scene;
use crate::{HandleId, Simulation};

/// The integrators `I` cycles through.
const INTEGRATORS: [&str; 6] = ["be", "bdf2", "im", "avf", "stabilized", "a-search"];

/// Handle stiffness of the mouse drag, per kilogram of the body: the pull feels the same on a
/// light cloth and a heavy bar.
const DRAG_STIFFNESS_PER_KG: f64 = 400.0;

/// How to open the viewer.
#[derive(Clone, Debug, Default)]
pub struct ViewOptions {
    /// Overrides the scene's integrator.
    pub integrator: Option<String>,
    /// Overrides the scene's backend.
    pub backend: Option<String>,
    /// Saves what the window shows after this many frames to the path, then quits (for tests
    /// and documentation).
    pub screenshot: Option<(usize, PathBuf)>,
}

/// Opens the window and runs until it is closed.
pub fn view(scene: Scene, options: ViewOptions) -> Result<()> {
    let event_loop = EventLoop::new()
        .map_err(|e| Error::Unsupported(format!("cannot open a window (no display?): {e}")))?;
    let integrator = options.integrator.clone();
    let mut viewer = Viewer { scene, options, integrator, running: None, failure: None };
    event_loop
        .run_app(&mut viewer)
        .map_err(|e| Error::Unsupported(format!("the window's event loop failed: {e}")))?;
    viewer.failure.map_or(Ok(()), Err)
}

struct Viewer {
    scene: Scene,
    options: ViewOptions,
    integrator: Option<String>,
    running: Option<Running>,
    failure: Option<Error>,
}

/// The window, its device and the simulation in it.
struct Running {
    window: Arc<Window>,
    surface: wgpu::Surface<'static>,
    config: wgpu::SurfaceConfiguration,
    context: Arc<GpuContext>,
    renderer: Renderer,
    sim: Simulation,
    camera: Camera,
    paused: bool,
    frames: usize,
    cursor: [f32; 2],
    orbiting: bool,
    drag: Option<Drag>,
}

/// A vertex pulled by the mouse: its handle, and the depth of the plane (facing the camera)
/// the handle moves in.
struct Drag {
    handle: HandleId,
    depth: f32,
}

impl Viewer {
    fn open(&mut self, event_loop: &ActiveEventLoop) -> Result<Running> {
        let unsupported = |what: &str, e: &dyn std::fmt::Display| Error::Unsupported(format!("{what}: {e}"));
        let title = format!("lively — {}", self.scene.name);
        let attributes = Window::default_attributes()
            .with_title(title)
            .with_inner_size(winit::dpi::LogicalSize::new(1100.0, 720.0));
        let window = Arc::new(
            event_loop.create_window(attributes).map_err(|e| unsupported("cannot create a window", &e))?,
        );
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_with_display_handle(Box::new(
            event_loop.owned_display_handle(),
        )));
        let surface = instance
            .create_surface(window.clone())
            .map_err(|e| unsupported("cannot draw into the window", &e))?;
        let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            compatible_surface: Some(&surface),
            ..Default::default()
        }))
        .map_err(|e| Error::NoGpu(format!("no adapter can draw into the window: {e}")))?;
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("lively view"),
            required_features: GpuContext::wanted_features(&adapter),
            required_limits: adapter.limits(),
            ..Default::default()
        }))
        .map_err(|e| Error::NoGpu(format!("the adapter refused a device: {e}")))?;
        let size = window.inner_size();
        let mut config = surface
            .get_default_config(&adapter, size.width.max(1), size.height.max(1))
            .ok_or_else(|| Error::Unsupported("the adapter cannot present to this window".into()))?;
        // An sRGB target, as the off-screen images use, so a screenshot matches the window.
        let capabilities = surface.get_capabilities(&adapter);
        if let Some(&srgb) = capabilities.formats.iter().find(|f| f.is_srgb()) {
            config.format = srgb;
        }
        config.present_mode = wgpu::PresentMode::AutoVsync;
        surface.configure(&device, &config);
        let context = Arc::new(GpuContext::from_device(device, queue));
        let sim = self.build(&context)?;
        let mut renderer = Renderer::new(
            &context.device,
            config.format,
            &sim.model().surface_triangles(),
            sim.positions().len(),
        )?;
        renderer.set_scenery(&context.device, &crate::render::scenery(&sim));
        let camera = crate::render::scene_camera(&sim);
        Ok(Running {
            window,
            surface,
            config,
            context,
            renderer,
            sim,
            camera,
            paused: false,
            frames: 0,
            cursor: [0.0; 2],
            orbiting: false,
            drag: None,
        })
    }

    /// The scene's simulation, on the window's device when it runs on the GPU.
    fn build(&self, context: &Arc<GpuContext>) -> Result<Simulation> {
        let sim = self.scene.build_on(
            self.integrator.as_deref(),
            self.options.backend.as_deref(),
            Some(context.clone()),
        )?;
        println!(
            "lively view: {} — {} on {:?}, {} vertices (space pause, S step, R reset, I integrator, right drag pulls)",
            self.scene.name,
            sim.integrator().name(),
            sim.backend(),
            sim.positions().len()
        );
        Ok(sim)
    }

    fn frame(&mut self, event_loop: &ActiveEventLoop) -> Result<()> {
        let Some(running) = self.running.as_mut() else { return Ok(()) };
        if !running.paused {
            self.scene.step(&mut running.sim)?;
        }
        running.frames += 1;
        let size = [running.config.width, running.config.height];
        let positions = running.sim.gpu_positions();
        if positions.is_none() {
            running.renderer.upload(&running.context.queue, running.sim.positions());
        }
        let frame = match running.surface.get_current_texture() {
            wgpu::CurrentSurfaceTexture::Success(frame) | wgpu::CurrentSurfaceTexture::Suboptimal(frame) => {
                frame
            }
            wgpu::CurrentSurfaceTexture::Timeout | wgpu::CurrentSurfaceTexture::Occluded => return Ok(()),
            _ => {
                running.surface.configure(&running.context.device, &running.config);
                return Ok(());
            }
        };
        let view = frame.texture.create_view(&Default::default());
        let mut encoder = running.context.device.create_command_encoder(&Default::default());
        running.renderer.draw(
            &running.context.device,
            &running.context.queue,
            &mut encoder,
            &view,
            size,
            &running.camera,
            positions,
        );
        running.context.queue.submit([encoder.finish()]);
        running.window.pre_present_notify();
        running.context.queue.present(frame);
        if let Some((at, path)) = &self.options.screenshot
            && running.frames >= *at
        {
            // The same frame through the same renderer, off screen, read back.
            let rgba = running.renderer.image(
                &running.context.device,
                &running.context.queue,
                size,
                &running.camera,
                positions,
            )?;
            crate::render::save_png(path, size, &rgba)?;
            println!("lively view: frame {} saved to {}", running.frames, path.display());
            event_loop.exit();
        }
        Ok(())
    }

    fn key(&mut self, key: &Key) -> Result<bool> {
        let Some(running) = self.running.as_mut() else { return Ok(true) };
        match key {
            Key::Named(NamedKey::Escape) => return Ok(false),
            Key::Named(NamedKey::Space) => running.paused = !running.paused,
            Key::Named(NamedKey::ArrowRight) => step_once(&self.scene, running)?,
            Key::Character(c) if c.eq_ignore_ascii_case("s") => step_once(&self.scene, running)?,
            Key::Character(c) if c.eq_ignore_ascii_case("r") => {
                running.sim = self.scene.build_on(
                    self.integrator.as_deref(),
                    self.options.backend.as_deref(),
                    Some(running.context.clone()),
                )?;
                running.drag = None;
            }
            Key::Character(c) if c.eq_ignore_ascii_case("i") => {
                let current = running.sim.integrator().name();
                let next =
                    INTEGRATORS.iter().position(|n| *n == current).map_or(0, |k| (k + 1) % INTEGRATORS.len());
                self.integrator = Some(INTEGRATORS[next].to_string());
                let (x, v) = (running.sim.positions().to_vec(), running.sim.velocities().to_vec());
                let mut sim = self.scene.build_on(
                    self.integrator.as_deref(),
                    self.options.backend.as_deref(),
                    Some(running.context.clone()),
                )?;
                // The motion goes on from where it is, under the new scheme.
                sim.set_state(&x, &v)?;
                println!("lively view: {}", sim.integrator().name());
                running.sim = sim;
                running.drag = None;
            }
            _ => {}
        }
        Ok(true)
    }

    fn pointer(&mut self, button: MouseButton, state: ElementState) -> Result<()> {
        let Some(running) = self.running.as_mut() else { return Ok(()) };
        match (button, state) {
            (MouseButton::Left, pressed) => running.orbiting = pressed == ElementState::Pressed,
            (MouseButton::Right, ElementState::Pressed) => {
                let (origin, direction) = running.ray();
                // The vertex nearest the ray, among those in front of the camera.
                let nearest = running
                    .sim
                    .positions()
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        let p = Vec3::new(p[0] as f32, p[1] as f32, p[2] as f32) - origin;
                        let along = p.dot(direction);
                        (i, along, (p - direction * along).length())
                    })
                    .filter(|(_, along, _)| *along > 0.0)
                    .min_by(|a, b| a.2.total_cmp(&b.2));
                if let Some((vertex, depth, _)) = nearest {
                    let mass: f64 = running.sim.model().masses().iter().sum();
                    let handle = running.sim.add_handle(vertex, DRAG_STIFFNESS_PER_KG * mass)?;
                    running.drag = Some(Drag { handle, depth });
                }
            }
            (MouseButton::Right, ElementState::Released) => {
                if let Some(drag) = running.drag.take() {
                    running.sim.release_handle(drag.handle)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn moved(&mut self, x: f32, y: f32) -> Result<()> {
        let Some(running) = self.running.as_mut() else { return Ok(()) };
        let (dx, dy) = (x - running.cursor[0], y - running.cursor[1]);
        running.cursor = [x, y];
        if running.orbiting {
            running.camera.orbit(dx * 0.008, dy * 0.008);
        }
        if let Some(drag) = &running.drag {
            let (origin, direction) = running.ray();
            let target = origin + direction * drag.depth;
            let handle = drag.handle;
            running.sim.move_handle(handle, [target.x as f64, target.y as f64, target.z as f64])?;
        }
        Ok(())
    }
}

impl Running {
    /// The ray under the cursor.
    fn ray(&self) -> (Vec3, Vec3) {
        let (w, h) = (self.config.width as f32, self.config.height as f32);
        let ndc = [2.0 * self.cursor[0] / w - 1.0, 1.0 - 2.0 * self.cursor[1] / h];
        self.camera.ray(w / h, ndc)
    }
}

fn step_once(scene: &Scene, running: &mut Running) -> Result<()> {
    if running.paused {
        scene.step(&mut running.sim)?;
    }
    Ok(())
}

impl ApplicationHandler for Viewer {
    fn resumed(&mut self, event_loop: &ActiveEventLoop) {
        if self.running.is_some() {
            return;
        }
        match self.open(event_loop) {
            Ok(running) => self.running = Some(running),
            Err(e) => {
                self.failure = Some(e);
                event_loop.exit();
            }
        }
    }

    fn window_event(&mut self, event_loop: &ActiveEventLoop, _: WindowId, event: WindowEvent) {
        let result = match event {
            WindowEvent::CloseRequested => {
                event_loop.exit();
                Ok(())
            }
            WindowEvent::Resized(size) => {
                if let Some(running) = self.running.as_mut() {
                    running.config.width = size.width.max(1);
                    running.config.height = size.height.max(1);
                    running.surface.configure(&running.context.device, &running.config);
                }
                Ok(())
            }
            WindowEvent::KeyboardInput { event, .. } if event.state == ElementState::Pressed => {
                self.key(&event.logical_key).map(|keep| {
                    if !keep {
                        event_loop.exit();
                    }
                })
            }
            WindowEvent::MouseInput { button, state, .. } => self.pointer(button, state),
            WindowEvent::CursorMoved { position, .. } => self.moved(position.x as f32, position.y as f32),
            WindowEvent::MouseWheel { delta, .. } => {
                if let Some(running) = self.running.as_mut() {
                    let lines = match delta {
                        MouseScrollDelta::LineDelta(_, y) => y,
                        MouseScrollDelta::PixelDelta(p) => p.y as f32 / 40.0,
                    };
                    running.camera.distance *= 0.9f32.powf(lines);
                }
                Ok(())
            }
            WindowEvent::RedrawRequested => self.frame(event_loop),
            _ => Ok(()),
        };
        if let Err(e) = result {
            self.failure = Some(e);
            event_loop.exit();
        }
    }

    fn about_to_wait(&mut self, _: &ActiveEventLoop) {
        if let Some(running) = &self.running {
            running.window.request_redraw();
        }
    }
}
