//! Integration tests: a real PostgreSQL, real Iceberg tables, real HTTP.

mod catalogs;
mod errors;
mod feed;
mod fixtures;
mod nodes;
mod openapi;
mod oracle;
mod pyiceberg;
mod retention;
mod sdk;
mod stream;
mod subscriptions;
mod support;
