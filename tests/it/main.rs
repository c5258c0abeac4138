//! Integration tests: a real PostgreSQL, real Iceberg tables, real HTTP.

mod catalogs;
mod change_stores;
mod diffing;
mod equality_deletes;
mod errors;
mod fault_proxy;
mod feed;
mod fixtures;
mod gcs;
mod hangs;
mod hostile;
mod nodes;
mod object_storage;
mod openapi;
mod opensearch;
mod oracle;
mod push;
mod pyiceberg;
mod retention;
mod s3;
mod schema_evolution;
mod sdk;
mod spark;
mod stream;
mod subscriptions;
mod support;
