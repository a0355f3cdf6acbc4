//! A simulation on the application's own wgpu device, drawn straight from its position buffer:
//! no readback of positions, ever. The application opens the device (as its renderer would),
//! hands lively a clone of it, and binds `sim.gpu_positions()` in its own render pass each
//! frame. Here the frames are drawn off screen and the last one is saved, so the example runs
//! headless: `cargo run --release --example shared_device` writes `shared-device.png`.

use lively::render::{Camera, IMAGE_FORMAT, Renderer, save_png};
use lively::{Backend, Collider, ContactModel, Integrator, Material, Simulation, TetMesh};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The application's device.
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))?;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("application"),
        // What lively's stages use where the adapter has it (subgroups, timestamps).
        required_features: lively::backend::gpu::GpuContext::wanted_features(&adapter),
        required_limits: adapter.limits(),
        ..Default::default()
    }))?;
    println!("device: {}", adapter.get_info().name);

    // The simulation runs its compute passes on that same device.
    let mut sim = Simulation::builder()
        .tet_body(TetMesh::bar([8, 3, 3], [0.8, 0.3, 0.3]), Material::stable_neo_hookean(2e5, 0.3), 800.0)
        .gravity([0.0, -9.81, 0.0])
        .integrator(Integrator::ASearch { alpha_min: 0.0, alpha_max: 1.1, decay: None })
        .collider(Collider::sphere([0.4, -0.5, 0.15], 0.4))
        .contact_model(ContactModel::Penalty { stiffness: 1e5 })
        .backend(Backend::Gpu)
        .wgpu_device(device.clone(), queue.clone())
        .build()?;

    // The application's renderer draws the simulation's own buffer.
    let mut renderer =
        Renderer::new(&device, IMAGE_FORMAT, &sim.model().surface_triangles(), sim.positions().len())?;
    let camera = Camera::framing(sim.positions());
    let size = [800, 500];
    let target = device.create_texture(&wgpu::TextureDescriptor {
        label: Some("frame"),
        size: wgpu::Extent3d { width: size[0], height: size[1], depth_or_array_layers: 1 },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: IMAGE_FORMAT,
        usage: wgpu::TextureUsages::RENDER_ATTACHMENT,
        view_formats: &[],
    });
    let view = target.create_view(&Default::default());
    for frame in 0..45 {
        let stats = sim.step()?;
        let positions = sim.gpu_positions().expect("the GPU backend keeps positions on the device");
        let mut encoder = device.create_command_encoder(&Default::default());
        renderer.draw(&device, &queue, &mut encoder, &view, size, &camera, Some(positions));
        queue.submit([encoder.finish()]);
        if frame % 15 == 0 {
            let device_stats = stats.device.expect("GPU steps count their device work");
            println!(
                "frame {frame}: {} Newton iterations, {} submissions, {} readbacks of scalars",
                stats.iterations, device_stats.submissions, device_stats.readbacks
            );
        }
    }
    // Only to save the picture: the frame itself never left the device.
    let rgba = renderer.image(&device, &queue, size, &camera, sim.gpu_positions())?;
    save_png("shared-device.png", size, &rgba)?;
    println!("wrote shared-device.png");
    Ok(())
}
