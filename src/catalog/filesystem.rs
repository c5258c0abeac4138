//! Tables without a catalog service: a Hadoop-style warehouse directory, where the newest
//! `metadata/vN.metadata.json` (or the one `version-hint.text` names) is current, or a
//! single metadata file. Either may be local or on an object store. A local warehouse is
//! probed on tokio's blocking pool, and its files are read only when they are regular
//! files (see [`super::local_file::LocalFileStorage`]).
//! Must not reach: `store`, `changes` (catalogs know nothing of feeds).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use iceberg::TableIdent;
use iceberg::io::{FileIO, FileIOBuilder};
use iceberg::table::{StaticTable, Table};

use super::local_file::read_regular;
use super::storage::is_local;
use super::{CatalogError, LocalPaths, StorageFault, TableStorageFactory, display_ident};

/// The most a `version-hint.text` may hold (it holds a version number).
const MAX_HINT_BYTES: u64 = 1024;

pub(super) async fn load(
    ident: &TableIdent,
    warehouse: Option<&str>,
    metadata_location: Option<&str>,
    properties: &BTreeMap<String, String>,
    local: &LocalPaths,
) -> Result<Table, CatalogError> {
    let file_io = FileIOBuilder::new(Arc::new(TableStorageFactory::new(local.clone())))
        .with_props(properties.iter())
        .build();
    let location = match (warehouse, metadata_location) {
        (_, Some(location)) => location.to_string(),
        (Some(warehouse), None) if is_local(warehouse) => {
            let (ident, warehouse, local) = (ident.clone(), warehouse.to_string(), local.clone());
            tokio::task::spawn_blocking(move || {
                let dir = local_dir(&warehouse)?;
                // Allowed first: outside the allowed directories, a missing directory
                // answers like an existing one.
                local
                    .check(&dir)
                    .map_err(|e| CatalogError::reading(&warehouse, e))?;
                if !dir.is_dir() {
                    return Err(CatalogError::Storage {
                        fault: StorageFault::NotFound,
                        location: warehouse,
                        cause: "no such directory".into(),
                    });
                }
                current_metadata(&ident, &dir)
            })
            .await
            .map_err(|e| CatalogError::Unreachable(format!("probing the warehouse: {e}")))??
        }
        (Some(warehouse), None) => current_remote_metadata(ident, warehouse, &file_io).await?,
        (None, None) => {
            return Err(CatalogError::Invalid(
                "a filesystem catalog needs `warehouse` or `metadata_location`".into(),
            ));
        }
    };
    let table = StaticTable::from_metadata_file(&location, ident.clone(), file_io)
        .await
        // A local metadata file that is not there is no table.
        .map_err(|e| {
            if is_local(&location) && StorageFault::of(&e) == Some(StorageFault::NotFound) {
                CatalogError::TableNotFound(display_ident(ident))
            } else {
                CatalogError::reading(&location, e)
            }
        })?;
    Ok(table.into_table())
}

/// The current metadata file of `ident` in a warehouse on an object store, which cannot
/// be listed through FileIO: the version `version-hint.text` names, or else the highest
/// `vN.metadata.json` found by probing (Hadoop tables number them from 1 without gaps),
/// then any newer versions a writer committed after updating the hint.
async fn current_remote_metadata(
    ident: &TableIdent,
    warehouse: &str,
    file_io: &FileIO,
) -> Result<String, CatalogError> {
    let mut dir = warehouse.trim_end_matches('/').to_string();
    for part in ident
        .namespace()
        .iter()
        .chain([ident.name().to_string()].iter())
    {
        dir.push('/');
        dir.push_str(part);
    }
    dir.push_str("/metadata");
    let version_file = |v: u64| format!("{dir}/v{v}.metadata.json");
    let exists = |path: String| async move {
        file_io
            .exists(&path)
            .await
            .map_err(|e| CatalogError::reading(&path, e))
    };
    let hint_path = format!("{dir}/version-hint.text");
    let hint = match file_io.new_input(&hint_path)?.read().await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().parse::<u64>().ok(),
        Err(e) => match super::StorageFault::of(&e) {
            Some(super::StorageFault::NotFound) => None,
            _ => return Err(CatalogError::reading(&hint_path, e)),
        },
    };
    let mut version = match hint {
        Some(v) if exists(version_file(v)).await? => v,
        _ => {
            // Gallop to a missing version, then bisect between the last found and it.
            let (mut found, mut probe) = (0, 1);
            while exists(version_file(probe)).await? {
                found = probe;
                probe *= 2;
            }
            let mut missing = probe;
            while missing - found > 1 {
                let mid = found + (missing - found) / 2;
                if exists(version_file(mid)).await? {
                    found = mid;
                } else {
                    missing = mid;
                }
            }
            found
        }
    };
    if version == 0 {
        return Err(CatalogError::TableNotFound(display_ident(ident)));
    }
    while exists(version_file(version + 1)).await? {
        version += 1;
    }
    Ok(version_file(version))
}

fn local_dir(warehouse: &str) -> Result<PathBuf, CatalogError> {
    let path = warehouse.strip_prefix("file://").unwrap_or(warehouse);
    if path.contains("://") {
        return Err(CatalogError::Invalid(format!(
            "filesystem warehouses must be local directories for now; got {warehouse:?}"
        )));
    }
    Ok(PathBuf::from(path))
}

/// The current metadata file of `ident` below `warehouse` (blocking: file system calls).
/// The hint is only a hint: one that cannot be read, or that names no regular file, is
/// passed over for the listing, whose newest entry is current whatever it is (one that
/// is no regular file then fails the read, rather than an older version being followed).
fn current_metadata(ident: &TableIdent, warehouse: &Path) -> Result<String, CatalogError> {
    let mut dir = warehouse.to_path_buf();
    dir.extend(ident.namespace().iter());
    dir.push(ident.name());
    dir.push("metadata");
    let not_found = || CatalogError::TableNotFound(display_ident(ident));
    let hint = read_regular(&dir.join("version-hint.text"), Some(MAX_HINT_BYTES))
        .ok()
        .and_then(|hint| String::from_utf8_lossy(&hint).trim().parse::<u64>().ok());
    if let Some(version) = hint {
        let candidate = dir.join(format!("v{version}.metadata.json"));
        if candidate.is_file() {
            return Ok(candidate.display().to_string());
        }
    }
    let entries = std::fs::read_dir(&dir).map_err(|_| not_found())?;
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            metadata_version(&name).map(|v| (v, e.path()))
        })
        .max_by_key(|(v, _)| *v)
        .map(|(_, p)| p.display().to_string())
        .ok_or_else(not_found)
}

/// The version of a metadata file name: `v12.metadata.json` or `00012-<uuid>.metadata.json`.
fn metadata_version(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".metadata.json")?;
    let stem = stem.strip_suffix(".gz").unwrap_or(stem);
    if let Some(v) = stem.strip_prefix('v') {
        return v.parse().ok();
    }
    stem.split('-').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::metadata_version;

    #[test]
    fn metadata_versions_parse_in_both_naming_schemes() {
        assert_eq!(metadata_version("v3.metadata.json"), Some(3));
        assert_eq!(metadata_version("v3.gz.metadata.json"), Some(3));
        assert_eq!(
            metadata_version("00012-9b1f1a94-7c1e-4b43-a0b5-3f2f6d1e0a11.metadata.json"),
            Some(12)
        );
        assert_eq!(metadata_version("version-hint.text"), None);
        assert_eq!(metadata_version("snap-1.avro"), None);
    }
}
