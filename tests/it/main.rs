//! Integration tests: a real PostgreSQL, real Iceberg tables, real HTTP.

mod errors;
mod feed;
mod fixtures;
mod nodes;
mod openapi;
mod pyiceberg;
mod support;
