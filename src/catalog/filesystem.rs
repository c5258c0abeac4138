//! Tables without a catalog service: a Hadoop-style warehouse directory, where the newest
//! `metadata/vN.metadata.json` (or the one `version-hint.text` names) is current, or a
//! single metadata file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use iceberg::TableIdent;
use iceberg::io::{FileIOBuilder, LocalFsStorageFactory};
use iceberg::table::{StaticTable, Table};
use std::sync::Arc;

use super::{CatalogError, display_ident};

pub(super) async fn load(
    ident: &TableIdent,
    warehouse: Option<&str>,
    metadata_location: Option<&str>,
    properties: &BTreeMap<String, String>,
) -> Result<Table, CatalogError> {
    let location = match (warehouse, metadata_location) {
        (_, Some(location)) => location.to_string(),
        (Some(warehouse), None) => current_metadata(ident, &local_dir(warehouse)?)?,
        (None, None) => {
            return Err(CatalogError::Invalid(
                "a filesystem catalog needs `warehouse` or `metadata_location`".into(),
            ));
        }
    };
    let file_io = FileIOBuilder::new(Arc::new(LocalFsStorageFactory))
        .with_props(properties.iter())
        .build();
    let table = StaticTable::from_metadata_file(&location, ident.clone(), file_io)
        .await
        // The local file system reports a missing file as `DataInvalid`, not by a kind of
        // its own: a local metadata file that is not there is no table, whatever the kind.
        .map_err(|e| {
            if missing_locally(&location) {
                CatalogError::TableNotFound(display_ident(ident))
            } else {
                CatalogError::Iceberg(e)
            }
        })?;
    Ok(table.into_table())
}

/// A local path (plain, `file:/…` or `file:///…`) where there is no file.
fn missing_locally(location: &str) -> bool {
    let path = location
        .strip_prefix("file://")
        .or_else(|| location.strip_prefix("file:"))
        .unwrap_or(location);
    !path.contains("://") && !Path::new(path).exists()
}

fn local_dir(warehouse: &str) -> Result<PathBuf, CatalogError> {
    let path = warehouse.strip_prefix("file://").unwrap_or(warehouse);
    if path.contains("://") {
        return Err(CatalogError::Invalid(format!(
            "filesystem warehouses must be local directories for now; got {warehouse:?}"
        )));
    }
    let path = PathBuf::from(path);
    if !path.is_dir() {
        return Err(CatalogError::Unreachable(format!(
            "warehouse directory {} does not exist",
            path.display()
        )));
    }
    Ok(path)
}

/// The current metadata file of `ident` below `warehouse`.
fn current_metadata(ident: &TableIdent, warehouse: &Path) -> Result<String, CatalogError> {
    let mut dir = warehouse.to_path_buf();
    dir.extend(ident.namespace().iter());
    dir.push(ident.name());
    dir.push("metadata");
    let not_found = || CatalogError::TableNotFound(display_ident(ident));
    if let Ok(hint) = std::fs::read_to_string(dir.join("version-hint.text")) {
        let candidate = dir.join(format!("v{}.metadata.json", hint.trim()));
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
