//! Writers: ParaView's VTK formats for tet meshes — legacy `.vtk`, XML `.vtu`, and a `.pvd`
//! time series of `.vtu` frames — and `.obj` / ASCII `.ply` for surfaces. A frame is the mesh's
//! topology at positions the caller gives (a simulation's current ones, say). Coordinates are
//! written in Rust's shortest round-trip form, so the readers give back the same `f64`s.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{TetMesh, TriMesh};
use crate::error::{Error, Result};

fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|source| Error::Io { path: path.display().to_string(), source })
}

fn extension(path: &Path) -> String {
    path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase()
}

/// `positions`, or the mesh's own, checked against its vertex count.
fn frame<'a>(mesh: &'a TetMesh, positions: Option<&'a [[f64; 3]]>) -> Result<&'a [[f64; 3]]> {
    let positions = positions.unwrap_or(mesh.positions());
    if positions.len() != mesh.vertex_count() {
        return Err(Error::Mesh(format!(
            "{} positions for a mesh of {} vertices",
            positions.len(),
            mesh.vertex_count()
        )));
    }
    if let Some(v) = positions.iter().position(|p| p.iter().any(|c| !c.is_finite())) {
        return Err(Error::Mesh(format!("position of vertex {v} is not finite: {:?}", positions[v])));
    }
    Ok(positions)
}

fn legacy_vtk(mesh: &TetMesh, positions: &[[f64; 3]]) -> String {
    let tets = mesh.tets();
    let mut out = format!(
        "# vtk DataFile Version 2.0\nlively\nASCII\nDATASET UNSTRUCTURED_GRID\nPOINTS {} double\n",
        positions.len()
    );
    for p in positions {
        let _ = writeln!(out, "{} {} {}", p[0], p[1], p[2]);
    }
    let _ = writeln!(out, "CELLS {} {}", tets.len(), 5 * tets.len());
    for t in tets {
        let _ = writeln!(out, "4 {} {} {} {}", t[0], t[1], t[2], t[3]);
    }
    let _ = writeln!(out, "CELL_TYPES {}", tets.len());
    out.push_str(&"10\n".repeat(tets.len()));
    out
}

fn vtu(mesh: &TetMesh, positions: &[[f64; 3]]) -> String {
    let tets = mesh.tets();
    let mut out = String::from(
        "<?xml version=\"1.0\"?>\n<VTKFile type=\"UnstructuredGrid\" version=\"0.1\" byte_order=\"LittleEndian\">\n\
         <UnstructuredGrid>\n",
    );
    let _ = writeln!(out, "<Piece NumberOfPoints=\"{}\" NumberOfCells=\"{}\">", positions.len(), tets.len());
    out.push_str("<Points>\n<DataArray type=\"Float64\" NumberOfComponents=\"3\" format=\"ascii\">\n");
    for p in positions {
        let _ = writeln!(out, "{} {} {}", p[0], p[1], p[2]);
    }
    out.push_str("</DataArray>\n</Points>\n<Cells>\n<DataArray type=\"Int64\" Name=\"connectivity\" format=\"ascii\">\n");
    for t in tets {
        let _ = writeln!(out, "{} {} {} {}", t[0], t[1], t[2], t[3]);
    }
    out.push_str("</DataArray>\n<DataArray type=\"Int64\" Name=\"offsets\" format=\"ascii\">\n");
    for k in 1..=tets.len() {
        let _ = write!(out, "{} ", 4 * k);
    }
    out.push_str("\n</DataArray>\n<DataArray type=\"UInt8\" Name=\"types\" format=\"ascii\">\n");
    out.push_str(&"10 ".repeat(tets.len()));
    out.push_str("\n</DataArray>\n</Cells>\n</Piece>\n</UnstructuredGrid>\n</VTKFile>\n");
    out
}

impl TetMesh {
    /// Writes the mesh at `positions` (one per vertex; its own when `None`), picking the format
    /// by extension: `.vtk` (legacy ASCII, which [`TetMesh::load`] reads back) or `.vtu`
    /// (VTK XML, ParaView's own).
    pub fn save(&self, path: impl AsRef<Path>, positions: Option<&[[f64; 3]]>) -> Result<()> {
        let path = path.as_ref();
        let positions = frame(self, positions)?;
        let text = match extension(path).as_str() {
            "vtk" => legacy_vtk(self, positions),
            "vtu" => vtu(self, positions),
            other => {
                return Err(Error::Mesh(format!(
                    "{}: unknown tet-mesh extension {other:?} for writing; use .vtk or .vtu",
                    path.display()
                )));
            }
        };
        write_file(path, &text)
    }

    /// The boundary surface at `positions` (its own when `None`): every vertex, and the
    /// boundary triangles of [`TetMesh::surface`].
    pub fn surface_mesh(&self, positions: Option<&[[f64; 3]]>) -> Result<TriMesh> {
        TriMesh::new(frame(self, positions)?.to_vec(), self.surface().to_vec())
    }
}

impl TriMesh {
    /// Writes the surface, picking the format by extension: `.obj` or ASCII `.ply` (both read
    /// back by [`TriMesh::load`]).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let (positions, triangles) = (self.positions(), self.triangles());
        let mut out = String::new();
        match extension(path).as_str() {
            "obj" => {
                for p in positions {
                    let _ = writeln!(out, "v {} {} {}", p[0], p[1], p[2]);
                }
                for t in triangles {
                    let _ = writeln!(out, "f {} {} {}", t[0] + 1, t[1] + 1, t[2] + 1);
                }
            }
            "ply" => {
                let _ = write!(
                    out,
                    "ply\nformat ascii 1.0\nelement vertex {}\nproperty double x\nproperty double y\n\
                     property double z\nelement face {}\nproperty list uchar int vertex_indices\nend_header\n",
                    positions.len(),
                    triangles.len()
                );
                for p in positions {
                    let _ = writeln!(out, "{} {} {}", p[0], p[1], p[2]);
                }
                for t in triangles {
                    let _ = writeln!(out, "3 {} {} {}", t[0], t[1], t[2]);
                }
            }
            other => {
                return Err(Error::Mesh(format!(
                    "{}: unknown surface extension {other:?} for writing; use .obj or .ply",
                    path.display()
                )));
            }
        }
        write_file(path, &out)
    }
}

/// A time series for ParaView: `.vtu` frames `NAME_00000.vtu`, `NAME_00001.vtu`, ... in a
/// folder, listed with their times in `NAME.pvd`, which is rewritten after every frame so that
/// it is valid whenever a run stops.
#[derive(Clone, Debug)]
pub struct VtuSeries {
    folder: PathBuf,
    name: String,
    frames: Vec<(f64, String)>,
}

impl VtuSeries {
    /// A series `name` in `folder` (created if missing).
    pub fn new(folder: impl AsRef<Path>, name: &str) -> Result<VtuSeries> {
        let folder = folder.as_ref().to_path_buf();
        std::fs::create_dir_all(&folder)
            .map_err(|source| Error::Io { path: folder.display().to_string(), source })?;
        Ok(VtuSeries { folder, name: name.to_string(), frames: Vec::new() })
    }

    /// Writes the next frame: `mesh` at `positions` (its own when `None`) at `time` (s).
    pub fn write_frame(&mut self, mesh: &TetMesh, time: f64, positions: Option<&[[f64; 3]]>) -> Result<()> {
        if !time.is_finite() {
            return Err(Error::Parameter(format!("frame time must be finite, got {time}")));
        }
        let file = format!("{}_{:05}.vtu", self.name, self.frames.len());
        mesh.save(self.folder.join(&file), positions)?;
        self.frames.push((time, file));
        let mut pvd = String::from(
            "<?xml version=\"1.0\"?>\n<VTKFile type=\"Collection\" version=\"0.1\">\n<Collection>\n",
        );
        for (time, file) in &self.frames {
            let _ = writeln!(pvd, "<DataSet timestep=\"{time}\" file=\"{file}\"/>");
        }
        pvd.push_str("</Collection>\n</VTKFile>\n");
        write_file(&self.folder.join(format!("{}.pvd", self.name)), &pvd)
    }

    /// The frames written so far.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether no frame is written yet.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
}
