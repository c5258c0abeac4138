package icefeed.testing;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.AppendFiles;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.ContentFile;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileContent;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.ManifestFile;
import org.apache.iceberg.ManifestFiles;
import org.apache.iceberg.ManifestReader;
import org.apache.iceberg.ManifestWriter;
import org.apache.iceberg.MetadataColumns;
import org.apache.iceberg.OverwriteFiles;
import org.apache.iceberg.PartitionField;
import org.apache.iceberg.PartitionKey;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.RewriteFiles;
import org.apache.iceberg.RowDelta;
import org.apache.iceberg.Schema;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.StaticTableOperations;
import org.apache.iceberg.StructLike;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.UpdatePartitionSpec;
import org.apache.iceberg.UpdateProperties;
import org.apache.iceberg.UpdateSchema;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.data.BaseDeleteLoader;
import org.apache.iceberg.data.GenericAppenderFactory;
import org.apache.iceberg.data.GenericRecord;
import org.apache.iceberg.data.IcebergGenerics;
import org.apache.iceberg.data.InternalRecordWrapper;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.data.parquet.GenericParquetReaders;
import org.apache.iceberg.deletes.BaseDVFileWriter;
import org.apache.iceberg.deletes.EqualityDeleteWriter;
import org.apache.iceberg.deletes.PositionDelete;
import org.apache.iceberg.deletes.PositionDeleteIndex;
import org.apache.iceberg.deletes.PositionDeleteWriter;
import org.apache.iceberg.encryption.EncryptedOutputFile;
import org.apache.iceberg.encryption.EncryptionUtil;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.expressions.Literal;
import org.apache.iceberg.expressions.Term;
import org.apache.iceberg.hadoop.HadoopCatalog;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.io.DataWriter;
import org.apache.iceberg.io.DeleteWriteResult;
import org.apache.iceberg.io.OutputFileFactory;
import org.apache.iceberg.parquet.Parquet;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.TypeUtil;
import org.apache.iceberg.types.Types;

/**
 * Writes Iceberg tables through Iceberg's own Java API, for icefeed's merge-on-read tests:
 * equality deletes, position deletes (v2) and deletion vectors (v3), explicit data sequence
 * numbers, schema and partition evolution, each step ONE commit on a table of a
 * HadoopCatalog in a local warehouse directory.
 *
 * <p>{@code IcebergWriter [script.json]} (stdin without an argument) reads
 * {@code {"warehouse": "/dir", "steps": [...]}} and prints one JSON line per step on stdout:
 * the step's index, op, table and name, and for commits the new snapshot's id, sequence
 * number, operation and the files it added; for {@code scan} the live rows; for
 * {@code files} the live files with their sequence numbers. Every step names its table
 * ({@code "table": "ns.name"}) or takes the previous step's. Rows are JSON objects keyed
 * by column name, NULL as null. Files and snapshots get names ({@code "name"}) that later
 * steps refer to: a file by its name (or its path), a snapshot by its name,
 * {@code "current"}, {@code "parent"} (the current snapshot's parent) or its id.
 *
 * <p>Steps ({@code op}):
 *
 * <ul>
 *   <li>{@code create}: {@code format_version} (2), {@code schema}
 *       ([{name, type, required}], default {@code id long required, v string, cat string}),
 *       {@code identifier} (default ["id"]), {@code partition} ([{source, transform, name}];
 *       transforms identity, bucket[N], truncate[W], year, month, day, hour, void;
 *       default unpartitioned), {@code properties}.
 *   <li>{@code append}: {@code files} [{name, rows, spec_id}] in one append;
 *       {@code data_sequence_number}: an explicit, older data sequence number for the files
 *       (written into a manifest that the append adds as it is).
 *   <li>{@code row_delta}: one {@code newRowDelta()}: {@code data} (files as for append),
 *       {@code equality_deletes} [{name, columns, rows, partition: {column: value},
 *       spec_id, global, row_columns: "key"|"all"}], {@code position_deletes} [{name,
 *       targets: [{file, positions}]}] (one position delete file per entry on v2; deletion
 *       vectors on v3, merged with the file's earlier ones, which the commit removes),
 *       {@code remove_data} and {@code remove_deletes} (names or paths). For many rows
 *       (the benchmarks): a {@code data} entry may take, instead of {@code rows}, the rows
 *       at {@code from} [{file, positions}] of live data files, read from their Parquet
 *       files, with {@code add} {column: number} added to numeric columns (null counts as
 *       0); it is written as one file per partition of its rows. An equality delete entry
 *       may take, instead of {@code rows}, {@code keys_of}: the name of such a data entry
 *       of the same step, whose rows' {@code columns} it deletes, as one equality delete
 *       file per partition of those rows (as an upsert writer commits them).
 *   <li>{@code delete_file}: {@code files} removed with {@code newDelete()}.
 *   <li>{@code overwrite}: {@code remove} and {@code add} in one {@code newOverwrite()}.
 *   <li>{@code rewrite}: {@code remove} and {@code add} in one {@code newRewrite()} (a
 *       {@code replace} snapshot), with an optional {@code data_sequence_number}.
 *   <li>{@code update_schema}: {@code add} [{name, type}], {@code rename} {old: new},
 *       {@code drop} [names], {@code identifier} [names]. No snapshot.
 *   <li>{@code update_spec}: {@code add} [{source, transform, name}], {@code remove}
 *       [partition field names], {@code rename} {old: new}. No snapshot.
 *   <li>{@code set_properties}: {@code properties}. No snapshot.
 *   <li>{@code expire}: {@code snapshot_ids} expired with {@code expireSnapshots()}; with
 *       {@code clean_files} true also the files only they referenced are deleted. No
 *       snapshot.
 *   <li>{@code rollback}: the branch back to its ancestor {@code snapshot_id}
 *       ({@code rollbackTo}); {@code set_current}: the branch to any snapshot
 *       {@code snapshot_id} ({@code setCurrentSnapshot}). No snapshot.
 *   <li>{@code history}: the ids of the current snapshot and its ancestors, oldest first
 *       ({@code lineage}).
 *   <li>{@code scan}: the live rows of {@code snapshot} (default current) as Iceberg Java
 *       reads them, with {@code _file} and {@code _pos}, projected by field id to the schema
 *       of {@code schema_of} (default: that snapshot's own schema).
 *   <li>{@code files}: the live data and delete files of {@code snapshot}.
 * </ul>
 */
public final class IcebergWriter {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

  private final HadoopCatalog catalog;
  private final Map<String, Tracked> tables = new HashMap<>();

  /** What a run remembers of a table: the names of its files and snapshots. */
  private static final class Tracked {
    final Map<String, DataFile> dataFiles = new HashMap<>();
    final Map<String, List<DeleteFile>> deleteFiles = new HashMap<>();
    final Map<String, Long> snapshots = new HashMap<>();
    /** The live data files by path, of snapshot {@code liveSnapshot}. */
    Map<String, DataFile> livePaths;
    long liveSnapshot;
  }

  private IcebergWriter(String warehouse) {
    this.catalog = new HadoopCatalog(new Configuration(), warehouse);
  }

  public static void main(String[] args) throws Exception {
    JsonNode script;
    try (InputStream in = args.length > 0 && !args[0].equals("-")
        ? new java.io.FileInputStream(new File(args[0]))
        : System.in) {
      script = JSON.readTree(in);
    }
    IcebergWriter writer = new IcebergWriter(text(script, "warehouse"));
    String table = null;
    int index = 0;
    for (JsonNode step : script.withArray("steps")) {
      if (step.has("table")) {
        table = step.get("table").asText();
      }
      if (table == null) {
        throw new IllegalArgumentException("step " + index + " names no table");
      }
      ObjectNode out;
      try {
        out = writer.run(table, step);
      } catch (RuntimeException | IOException e) {
        System.err.println("step " + index + " (" + step + ") failed:");
        throw e;
      }
      ObjectNode line = NODES.objectNode();
      line.put("step", index);
      line.put("op", text(step, "op"));
      line.put("table", table);
      if (step.has("name")) {
        line.set("name", step.get("name"));
      }
      line.setAll(out);
      System.out.println(JSON.writeValueAsString(line));
      System.out.flush();
      index += 1;
    }
  }

  private ObjectNode run(String name, JsonNode step) throws IOException {
    TableIdentifier ident = TableIdentifier.parse(name);
    Tracked tracked = tables.computeIfAbsent(name, n -> new Tracked());
    String op = text(step, "op");
    if (op.equals("create")) {
      create(ident, step);
      return NODES.objectNode();
    }
    Table table = catalog.loadTable(ident);
    switch (op) {
      case "append":
        return committed(table, tracked, step, append(table, tracked, step));
      case "row_delta":
        return committed(table, tracked, step, rowDelta(table, tracked, step));
      case "delete_file":
        {
          org.apache.iceberg.DeleteFiles delete = table.newDelete();
          for (JsonNode f : step.withArray("files")) {
            delete.deleteFile(dataFile(table, tracked, f.asText()));
          }
          delete.commit();
          return committed(table, tracked, step, List.of());
        }
      case "overwrite":
        {
          OverwriteFiles overwrite = table.newOverwrite();
          for (JsonNode f : step.withArray("remove")) {
            overwrite.deleteFile(dataFile(table, tracked, f.asText()));
          }
          List<ContentFile<?>> added = new ArrayList<>();
          for (JsonNode f : step.withArray("add")) {
            DataFile file = writeData(table, tracked, f);
            overwrite.addFile(file);
            added.add(file);
          }
          overwrite.commit();
          return committed(table, tracked, step, added);
        }
      case "rewrite":
        {
          RewriteFiles rewrite = table.newRewrite();
          for (JsonNode f : step.withArray("remove")) {
            rewrite.deleteFile(dataFile(table, tracked, f.asText()));
          }
          List<ContentFile<?>> added = new ArrayList<>();
          for (JsonNode f : step.withArray("add")) {
            DataFile file = writeData(table, tracked, f);
            rewrite.addFile(file);
            added.add(file);
          }
          if (step.has("data_sequence_number")) {
            rewrite.dataSequenceNumber(step.get("data_sequence_number").asLong());
          }
          rewrite.commit();
          return committed(table, tracked, step, added);
        }
      case "expire":
        {
          // As maintenance does it; `clean_files` also deletes the files only they held.
          org.apache.iceberg.ExpireSnapshots expire =
              table.expireSnapshots().cleanExpiredFiles(step.path("clean_files").asBoolean(false));
          for (JsonNode id : step.withArray("snapshot_ids")) {
            expire.expireSnapshotId(id.asLong());
          }
          expire.commit();
          return NODES.objectNode();
        }
      case "rollback":
        // As an operator's `rollback_to_snapshot` does: the branch goes back to an ancestor.
        table.manageSnapshots().rollbackTo(step.get("snapshot_id").asLong()).commit();
        return NODES.objectNode();
      case "set_current":
        // As `set_current_snapshot` does: the branch moves to any snapshot, forward again too.
        table.manageSnapshots().setCurrentSnapshot(step.get("snapshot_id").asLong()).commit();
        return NODES.objectNode();
      case "update_schema":
        updateSchema(table, step);
        return NODES.objectNode().put("schema_id", reload(table).schema().schemaId());
      case "update_spec":
        updateSpec(table, step);
        return NODES.objectNode().put("spec_id", reload(table).spec().specId());
      case "set_properties":
        {
          UpdateProperties update = table.updateProperties();
          step.withObject("properties").fields()
              .forEachRemaining(e -> update.set(e.getKey(), e.getValue().asText()));
          update.commit();
          return NODES.objectNode();
        }
      case "history":
        {
          // The branch's snapshots, oldest first.
          List<Long> ids = new ArrayList<>();
          for (Snapshot s = table.currentSnapshot(); s != null;
              s = s.parentId() == null ? null : table.snapshot(s.parentId())) {
            ids.add(0, s.snapshotId());
          }
          ArrayNode lineage = NODES.arrayNode();
          ids.forEach(lineage::add);
          ObjectNode out = NODES.objectNode();
          out.set("lineage", lineage);
          return out;
        }
      case "scan":
        return scan(table, tracked, step);
      case "files":
        return files(table, tracked, step);
      default:
        throw new IllegalArgumentException("unknown op " + op);
    }
  }

  // ---------------------------------------------------------------------------------
  // Tables, schemas and specs
  // ---------------------------------------------------------------------------------

  private void create(TableIdentifier ident, JsonNode step) {
    List<Types.NestedField> fields = new ArrayList<>();
    JsonNode columns = step.get("schema");
    if (columns == null) {
      columns = defaultSchema();
    }
    int id = 1;
    for (JsonNode c : columns) {
      Type type = type(text(c, "type"));
      String name = text(c, "name");
      fields.add(c.path("required").asBoolean(false)
          ? Types.NestedField.required(id, name, type)
          : Types.NestedField.optional(id, name, type));
      id += 1;
    }
    Schema plain = new Schema(fields);
    Set<Integer> identifier = new LinkedHashSet<>();
    JsonNode names = step.has("identifier")
        ? step.get("identifier")
        : (step.has("schema") ? NODES.arrayNode() : NODES.arrayNode().add("id"));
    for (JsonNode n : names) {
      identifier.add(field(plain, n.asText()).fieldId());
    }
    Schema schema = new Schema(fields, identifier);
    PartitionSpec.Builder spec = PartitionSpec.builderFor(schema);
    for (JsonNode p : step.withArray("partition")) {
      addPartitionField(spec, p);
    }
    Map<String, String> properties = new HashMap<>();
    properties.put("format-version", String.valueOf(step.path("format_version").asInt(2)));
    step.withObject("properties").fields()
        .forEachRemaining(e -> properties.put(e.getKey(), e.getValue().asText()));
    if (!catalog.namespaceExists(ident.namespace())) {
      catalog.createNamespace(ident.namespace());
    }
    catalog.createTable(ident, schema, spec.build(), properties);
  }

  private static JsonNode defaultSchema() {
    ArrayNode columns = NODES.arrayNode();
    columns.addObject().put("name", "id").put("type", "long").put("required", true);
    columns.addObject().put("name", "v").put("type", "string");
    columns.addObject().put("name", "cat").put("type", "string");
    return columns;
  }

  private static void addPartitionField(PartitionSpec.Builder spec, JsonNode p) {
    String source = text(p, "source");
    String transform = p.path("transform").asText("identity");
    String name = p.has("name") ? p.get("name").asText() : null;
    int arg = transformArgument(transform);
    switch (transformName(transform)) {
      case "identity":
        if (name == null) spec.identity(source); else spec.identity(source, name);
        break;
      case "bucket":
        if (name == null) spec.bucket(source, arg); else spec.bucket(source, arg, name);
        break;
      case "truncate":
        if (name == null) spec.truncate(source, arg); else spec.truncate(source, arg, name);
        break;
      case "year":
        if (name == null) spec.year(source); else spec.year(source, name);
        break;
      case "month":
        if (name == null) spec.month(source); else spec.month(source, name);
        break;
      case "day":
        if (name == null) spec.day(source); else spec.day(source, name);
        break;
      case "hour":
        if (name == null) spec.hour(source); else spec.hour(source, name);
        break;
      case "void":
        if (name == null) spec.alwaysNull(source); else spec.alwaysNull(source, name);
        break;
      default:
        throw new IllegalArgumentException("unknown transform " + transform);
    }
  }

  private static Term term(JsonNode p) {
    String source = text(p, "source");
    String transform = p.path("transform").asText("identity");
    int arg = transformArgument(transform);
    switch (transformName(transform)) {
      case "identity": return Expressions.ref(source);
      case "bucket": return Expressions.bucket(source, arg);
      case "truncate": return Expressions.truncate(source, arg);
      case "year": return Expressions.year(source);
      case "month": return Expressions.month(source);
      case "day": return Expressions.day(source);
      case "hour": return Expressions.hour(source);
      default: throw new IllegalArgumentException("unknown transform " + transform);
    }
  }

  private static String transformName(String transform) {
    int bracket = transform.indexOf('[');
    return bracket < 0 ? transform : transform.substring(0, bracket);
  }

  private static int transformArgument(String transform) {
    int bracket = transform.indexOf('[');
    return bracket < 0 ? 0
        : Integer.parseInt(transform.substring(bracket + 1, transform.length() - 1));
  }

  /** A JSON value as an Iceberg literal of `type`. */
  private static Literal<?> literal(JsonNode value, Type type) {
    Literal<?> literal;
    if (value.isTextual()) {
      literal = Literal.of(value.asText());
    } else if (value.isBoolean()) {
      literal = Literal.of(value.asBoolean());
    } else if (value.isIntegralNumber()) {
      literal = Literal.of(value.asLong());
    } else {
      literal = Literal.of(value.asDouble());
    }
    Literal<?> converted = literal.to(type);
    if (converted == null) {
      throw new IllegalArgumentException("default " + value + " is not a " + type);
    }
    return converted;
  }

  private static void updateSchema(Table table, JsonNode step) {
    UpdateSchema update = table.updateSchema();
    for (JsonNode c : step.withArray("add")) {
      Type type = type(text(c, "type"));
      if (c.path("required").asBoolean(false)) {
        update.allowIncompatibleChanges().addRequiredColumn(text(c, "name"), type);
      } else if (c.has("default")) {
        // v3: older files read the column as this initial default.
        update.addColumn(text(c, "name"), type, literal(c.get("default"), type));
      } else {
        update.addColumn(text(c, "name"), type);
      }
    }
    step.withObject("rename").fields()
        .forEachRemaining(e -> update.renameColumn(e.getKey(), e.getValue().asText()));
    for (JsonNode c : step.withArray("drop")) {
      update.deleteColumn(c.asText());
    }
    if (step.has("identifier")) {
      List<String> names = new ArrayList<>();
      step.get("identifier").forEach(n -> names.add(n.asText()));
      update.setIdentifierFields(names);
    }
    update.commit();
  }

  private static void updateSpec(Table table, JsonNode step) {
    UpdatePartitionSpec update = table.updateSpec();
    for (JsonNode p : step.withArray("add")) {
      if (p.has("name")) {
        update.addField(p.get("name").asText(), term(p));
      } else {
        update.addField(term(p));
      }
    }
    for (JsonNode p : step.withArray("remove")) {
      update.removeField(p.asText());
    }
    step.withObject("rename").fields()
        .forEachRemaining(e -> update.renameField(e.getKey(), e.getValue().asText()));
    update.commit();
  }

  private static Type type(String name) {
    switch (name) {
      case "long": return Types.LongType.get();
      case "int": return Types.IntegerType.get();
      case "string": return Types.StringType.get();
      case "boolean": return Types.BooleanType.get();
      case "double": return Types.DoubleType.get();
      case "float": return Types.FloatType.get();
      case "date": return Types.DateType.get();
      case "timestamp": return Types.TimestampType.withoutZone();
      case "timestamptz": return Types.TimestampType.withZone();
      case "uuid": return Types.UUIDType.get();
      default:
        if (name.startsWith("decimal(")) {
          String[] ps = name.substring(8, name.length() - 1).split(",");
          return Types.DecimalType.of(Integer.parseInt(ps[0].trim()), Integer.parseInt(ps[1].trim()));
        }
        throw new IllegalArgumentException("unknown type " + name);
    }
  }

  private static Types.NestedField field(Schema schema, String name) {
    Types.NestedField field = schema.findField(name);
    if (field == null) {
      throw new IllegalArgumentException("no column " + name + " in " + schema);
    }
    return field;
  }

  private static TableOperations ops(Table table) {
    return ((HasTableOperations) table).operations();
  }

  private static Table reload(Table table) {
    table.refresh();
    return table;
  }

  // ---------------------------------------------------------------------------------
  // Commits
  // ---------------------------------------------------------------------------------

  private List<ContentFile<?>> append(Table table, Tracked tracked, JsonNode step) throws IOException {
    List<ContentFile<?>> added = new ArrayList<>();
    List<DataFile> files = new ArrayList<>();
    for (JsonNode f : step.withArray("files")) {
      DataFile file = writeData(table, tracked, f);
      files.add(file);
      added.add(file);
    }
    AppendFiles append = table.newFastAppend();
    if (step.has("data_sequence_number")) {
      // No append API takes a data sequence number; a manifest written with explicit ones
      // and appended as it is (snapshot ids are inherited on v2+) keeps them.
      long sequence = step.get("data_sequence_number").asLong();
      Map<Integer, List<DataFile>> bySpec = new TreeMap<>();
      files.forEach(f -> bySpec.computeIfAbsent(f.specId(), s -> new ArrayList<>()).add(f));
      for (Map.Entry<Integer, List<DataFile>> e : bySpec.entrySet()) {
        String path = ops(table).metadataFileLocation("appended-" + UUID.randomUUID() + "-m0.avro");
        ManifestWriter<DataFile> writer = ManifestFiles.write(
            ops(table).current().formatVersion(), table.specs().get(e.getKey()),
            EncryptionUtil.plainAsEncryptedOutput(table.io().newOutputFile(path)), null);
        try (ManifestWriter<DataFile> w = writer) {
          for (DataFile f : e.getValue()) {
            w.add(f, sequence);
          }
        }
        append.appendManifest(writer.toManifestFile());
      }
    } else {
      files.forEach(append::appendFile);
    }
    append.commit();
    return added;
  }

  private List<ContentFile<?>> rowDelta(Table table, Tracked tracked, JsonNode step) throws IOException {
    RowDelta delta = table.newRowDelta();
    if (table.currentSnapshot() != null) {
      // What the deletes were written against (as engines do): without it, the check for
      // concurrently added DVs looks at the whole history and refuses a table's second DV.
      delta.validateFromSnapshot(table.currentSnapshot().snapshotId());
    }
    List<ContentFile<?>> added = new ArrayList<>();
    Map<String, DataFile> thisStep = new HashMap<>();
    Map<String, List<Record>> copiedRows = new HashMap<>();
    for (JsonNode f : step.withArray("data")) {
      List<DataFile> files;
      if (f.has("from")) {
        List<Record> rows = copiedRows(table, tracked, f);
        copiedRows.put(text(f, "name"), rows);
        files = writeDataByPartition(table, tracked, text(f, "name"), rows);
      } else {
        files = List.of(writeData(table, tracked, f));
      }
      for (DataFile file : files) {
        delta.addRows(file);
        added.add(file);
        thisStep.put(file.location(), file);
      }
    }
    for (JsonNode d : step.withArray("equality_deletes")) {
      List<DeleteFile> files = d.has("keys_of")
          ? writeEqualityDeletesOf(table, tracked, d, copiedRows)
          : List.of(writeEqualityDeletes(table, tracked, d));
      for (DeleteFile file : files) {
        delta.addDeletes(file);
        added.add(file);
      }
    }
    for (JsonNode d : step.withArray("position_deletes")) {
      for (DeleteFile file : writePositionDeletes(table, tracked, d, thisStep, delta)) {
        delta.addDeletes(file);
        added.add(file);
      }
    }
    for (JsonNode f : step.withArray("remove_data")) {
      delta.removeRows(dataFile(table, tracked, f.asText()));
    }
    for (JsonNode f : step.withArray("remove_deletes")) {
      for (DeleteFile file : deleteFiles(table, tracked, f.asText())) {
        delta.removeDeletes(file);
      }
    }
    delta.commit();
    return added;
  }

  /** The output line of a commit: its snapshot, and the files it added. */
  private ObjectNode committed(Table table, Tracked tracked, JsonNode step, List<ContentFile<?>> added) {
    Snapshot snapshot = reload(table).currentSnapshot();
    if (step.has("name")) {
      tracked.snapshots.put(step.get("name").asText(), snapshot.snapshotId());
    }
    ObjectNode out = NODES.objectNode();
    out.put("snapshot_id", snapshot.snapshotId());
    if (snapshot.parentId() == null) {
      out.putNull("parent_id");
    } else {
      out.put("parent_id", snapshot.parentId());
    }
    out.put("sequence_number", snapshot.sequenceNumber());
    out.put("operation", snapshot.operation());
    out.put("schema_id", snapshot.schemaId());
    ArrayNode files = out.putArray("added");
    for (ContentFile<?> f : added) {
      ObjectNode o = files.addObject();
      o.put("path", f.location());
      o.put("content", content(f.content()));
      o.put("records", f.recordCount());
    }
    return out;
  }

  // ---------------------------------------------------------------------------------
  // Writing files
  // ---------------------------------------------------------------------------------

  private DataFile writeData(Table table, Tracked tracked, JsonNode f) throws IOException {
    Schema schema = table.schema();
    PartitionSpec spec = f.has("spec_id") ? table.specs().get(f.get("spec_id").asInt()) : table.spec();
    String label = text(f, "name");
    List<Record> rows = new ArrayList<>();
    for (JsonNode r : f.withArray("rows")) {
      rows.add(record(schema, r));
    }
    if (rows.isEmpty()) {
      throw new IllegalArgumentException("data file " + label + " has no rows");
    }
    StructLike partition = null;
    if (spec.isPartitioned()) {
      PartitionKey key = partitionOf(spec, schema, rows.get(0));
      for (Record r : rows) {
        if (!partitionOf(spec, schema, r).equals(key)) {
          throw new IllegalArgumentException("the rows of " + label + " span partitions: " + r);
        }
      }
      partition = key;
    }
    GenericAppenderFactory factory = new GenericAppenderFactory(table, schema, spec, null, null, null, null);
    DataWriter<Record> writer = factory.newDataWriter(output(table, spec, partition, label), FileFormat.PARQUET, partition);
    try (DataWriter<Record> w = writer) {
      rows.forEach(w::write);
    }
    DataFile file = writer.toDataFile();
    tracked.dataFiles.put(label, file);
    return file;
  }

  /** The rows at a data entry's "from" positions, with its "add" applied. */
  private static List<Record> copiedRows(Table table, Tracked tracked, JsonNode f) throws IOException {
    Schema schema = table.schema();
    Map<String, JsonNode> add = new LinkedHashMap<>();
    f.withObject("add").fields().forEachRemaining(e -> add.put(e.getKey(), e.getValue()));
    for (String column : add.keySet()) {
      field(schema, column);
    }
    List<Record> rows = new ArrayList<>();
    for (JsonNode t : f.withArray("from")) {
      DataFile file = dataFile(table, tracked, text(t, "file"));
      long[] wanted = new long[t.withArray("positions").size()];
      int i = 0;
      for (JsonNode p : t.withArray("positions")) {
        wanted[i++] = p.asLong();
      }
      java.util.Arrays.sort(wanted);
      for (Record r : rowsAt(table, file, wanted)) {
        for (Map.Entry<String, JsonNode> e : add.entrySet()) {
          r.setField(e.getKey(), plus(field(schema, e.getKey()).type(), r.getField(e.getKey()), e.getValue()));
        }
        rows.add(r);
      }
    }
    if (rows.isEmpty()) {
      throw new IllegalArgumentException("data file " + text(f, "name") + " has no rows");
    }
    return rows;
  }

  /** The rows at the (sorted) positions of a data file, read with Iceberg's Parquet reader. */
  private static List<Record> rowsAt(Table table, DataFile file, long[] positions) throws IOException {
    Schema schema = table.schema();
    List<Record> out = new ArrayList<>(positions.length);
    int next = 0;
    long pos = 0;
    try (CloseableIterable<Record> rows = Parquet.read(table.io().newInputFile(file.location()))
        .project(schema)
        .createReaderFunc(fileSchema -> GenericParquetReaders.buildReader(schema, fileSchema))
        .build()) {
      for (Record r : rows) {
        if (next == positions.length) {
          break;
        }
        if (pos == positions[next]) {
          out.add(r.copy());
          while (next < positions.length && positions[next] == pos) {
            next += 1;
          }
        }
        pos += 1;
      }
    }
    if (next < positions.length) {
      throw new IllegalArgumentException(
          "position " + positions[next] + " is beyond the " + pos + " rows of " + file.location());
    }
    return out;
  }

  private static Object plus(Type type, Object old, JsonNode amount) {
    switch (type.typeId()) {
      case DOUBLE: return (old == null ? 0.0 : (Double) old) + amount.asDouble();
      case FLOAT: return (old == null ? 0.0f : (Float) old) + (float) amount.asDouble();
      case LONG: return (old == null ? 0L : (Long) old) + amount.asLong();
      case INTEGER: return (old == null ? 0 : (Integer) old) + amount.asInt();
      default: throw new IllegalArgumentException("cannot add to a " + type + " column");
    }
  }

  /** Rows grouped by their partition in the table's current spec (one group if unpartitioned). */
  private static Map<StructLike, List<Record>> byPartition(Table table, PartitionSpec spec, List<Record> rows) {
    Map<StructLike, List<Record>> groups = new LinkedHashMap<>();
    for (Record r : rows) {
      StructLike key = spec.isPartitioned() ? partitionOf(spec, table.schema(), r) : null;
      groups.computeIfAbsent(key, k -> new ArrayList<>()).add(r);
    }
    return groups;
  }

  /** One data file per partition of the rows, in the table's current spec. */
  private List<DataFile> writeDataByPartition(Table table, Tracked tracked, String label, List<Record> rows)
      throws IOException {
    PartitionSpec spec = table.spec();
    GenericAppenderFactory factory = new GenericAppenderFactory(table, table.schema(), spec, null, null, null, null);
    List<DataFile> files = new ArrayList<>();
    for (Map.Entry<StructLike, List<Record>> group : byPartition(table, spec, rows).entrySet()) {
      StructLike partition = group.getKey();
      DataWriter<Record> writer =
          factory.newDataWriter(output(table, spec, partition, label), FileFormat.PARQUET, partition);
      try (DataWriter<Record> w = writer) {
        group.getValue().forEach(w::write);
      }
      files.add(writer.toDataFile());
    }
    if (files.size() == 1) {
      tracked.dataFiles.put(label, files.get(0));
    }
    return files;
  }

  /**
   * Equality deletes of the "columns" of the rows of a data entry of this step ("keys_of"),
   * one file per partition of those rows.
   */
  private List<DeleteFile> writeEqualityDeletesOf(
      Table table, Tracked tracked, JsonNode d, Map<String, List<Record>> copiedRows) throws IOException {
    Schema schema = table.schema();
    String label = text(d, "name");
    List<Record> rows = copiedRows.get(text(d, "keys_of"));
    if (rows == null) {
      throw new IllegalArgumentException("no data entry with \"from\" named " + d.get("keys_of") + " in this step");
    }
    Set<Integer> ids = new LinkedHashSet<>();
    for (JsonNode c : d.withArray("columns")) {
      ids.add(field(schema, c.asText()).fieldId());
    }
    if (ids.isEmpty()) {
      throw new IllegalArgumentException("equality delete " + label + " has no columns");
    }
    Schema rowSchema = TypeUtil.select(schema, ids);
    PartitionSpec spec = deleteSpec(table, d);
    int[] idArray = ids.stream().mapToInt(Integer::intValue).toArray();
    GenericAppenderFactory factory = new GenericAppenderFactory(table, schema, spec, null, idArray, rowSchema, null);
    List<DeleteFile> files = new ArrayList<>();
    for (Map.Entry<StructLike, List<Record>> group : byPartition(table, spec, rows).entrySet()) {
      StructLike partition = group.getKey();
      EqualityDeleteWriter<Record> writer =
          factory.newEqDeleteWriter(output(table, spec, partition, label), FileFormat.PARQUET, partition);
      try (EqualityDeleteWriter<Record> w = writer) {
        for (Record r : group.getValue()) {
          GenericRecord key = GenericRecord.create(rowSchema);
          for (Types.NestedField c : rowSchema.columns()) {
            key.setField(c.name(), r.getField(c.name()));
          }
          w.write(key);
        }
      }
      files.add(writer.toDeleteFile());
    }
    tracked.deleteFiles.put(label, files);
    return files;
  }

  private DeleteFile writeEqualityDeletes(Table table, Tracked tracked, JsonNode d) throws IOException {
    Schema schema = table.schema();
    String label = text(d, "name");
    PartitionSpec spec = deleteSpec(table, d);
    List<Integer> ids = new ArrayList<>();
    for (JsonNode c : d.withArray("columns")) {
      ids.add(field(schema, c.asText()).fieldId());
    }
    if (ids.isEmpty()) {
      throw new IllegalArgumentException("equality delete " + label + " has no columns");
    }
    Schema rowSchema = d.path("row_columns").asText("key").equals("all")
        ? schema
        : TypeUtil.select(schema, new LinkedHashSet<>(ids));
    StructLike partition = null;
    if (spec.isPartitioned()) {
      // The partition: given, or taken from the first delete row when it carries the
      // partition's source columns.
      JsonNode values = d.has("partition") ? d.get("partition") : d.withArray("rows").get(0);
      partition = partitionOf(spec, schema, partialRecord(schema, values));
    }
    int[] idArray = ids.stream().mapToInt(Integer::intValue).toArray();
    GenericAppenderFactory factory = new GenericAppenderFactory(table, schema, spec, null, idArray, rowSchema, null);
    EqualityDeleteWriter<Record> writer =
        factory.newEqDeleteWriter(output(table, spec, partition, label), FileFormat.PARQUET, partition);
    try (EqualityDeleteWriter<Record> w = writer) {
      for (JsonNode r : d.withArray("rows")) {
        w.write(record(rowSchema, r));
      }
    }
    DeleteFile file = writer.toDeleteFile();
    tracked.deleteFiles.put(label, List.of(file));
    return file;
  }

  private static PartitionSpec deleteSpec(Table table, JsonNode d) {
    if (d.path("global").asBoolean(false)) {
      return table.specs().values().stream()
          .filter(PartitionSpec::isUnpartitioned)
          .min(Comparator.comparingInt(PartitionSpec::specId))
          .orElseThrow(() -> new IllegalArgumentException(
              "a global equality delete needs an unpartitioned spec; the table has " + table.specs()));
    }
    return d.has("spec_id") ? table.specs().get(d.get("spec_id").asInt()) : table.spec();
  }

  /**
   * One position delete file for the targets (v2; they must share a partition), or one
   * deletion vector per target data file in one Puffin file (v3), merged with the
   * positions of the file's live position deletes, which the row delta then removes when
   * file-scoped (as Spark's writes do).
   */
  private List<DeleteFile> writePositionDeletes(
      Table table, Tracked tracked, JsonNode d, Map<String, DataFile> thisStep, RowDelta delta)
      throws IOException {
    String label = text(d, "name");
    List<Map.Entry<DataFile, List<Long>>> targets = new ArrayList<>();
    for (JsonNode t : d.withArray("targets")) {
      DataFile file = dataFile(table, tracked, text(t, "file"));
      List<Long> positions = new ArrayList<>();
      t.withArray("positions").forEach(p -> positions.add(p.asLong()));
      targets.add(Map.entry(file, positions));
    }
    if (targets.isEmpty()) {
      throw new IllegalArgumentException("position delete " + label + " has no targets");
    }
    int formatVersion = ops(table).current().formatVersion();
    if (formatVersion >= 3) {
      Map<String, DeleteFile> live = livePositionDeletes(table);
      BaseDeleteLoader loader = new BaseDeleteLoader(f -> table.io().newInputFile(f));
      OutputFileFactory files = OutputFileFactory.builderFor(table, 0, 0)
          .format(FileFormat.PUFFIN).operationId(label + "-" + UUID.randomUUID()).build();
      BaseDVFileWriter writer = new BaseDVFileWriter(files, path -> {
        List<DeleteFile> previous = new ArrayList<>();
        for (Map.Entry<String, DeleteFile> e : live.entrySet()) {
          if (e.getKey().startsWith(path + "\u0000")) {
            previous.add(e.getValue());
          }
        }
        return previous.isEmpty() ? null : loader.loadPositionDeletes(previous, path);
      });
      try (BaseDVFileWriter w = writer) {
        for (Map.Entry<DataFile, List<Long>> t : targets) {
          DataFile file = t.getKey();
          PartitionSpec spec = table.specs().get(file.specId());
          for (long pos : t.getValue()) {
            w.delete(file.location(), pos, spec, file.partition());
          }
        }
      }
      DeleteWriteResult result = writer.result();
      result.rewrittenDeleteFiles().forEach(delta::removeDeletes);
      tracked.deleteFiles.put(label, result.deleteFiles());
      return result.deleteFiles();
    }
    DataFile first = targets.get(0).getKey();
    PartitionSpec spec = table.specs().get(first.specId());
    for (Map.Entry<DataFile, List<Long>> t : targets) {
      DataFile file = t.getKey();
      if (file.specId() != first.specId() || !samePartition(spec, file.partition(), first.partition())) {
        throw new IllegalArgumentException("the targets of " + label + " span partitions");
      }
    }
    // Position delete files are sorted by file path, then position.
    List<long[]> order = new ArrayList<>();
    List<String> paths = new ArrayList<>();
    for (Map.Entry<DataFile, List<Long>> t : targets) {
      for (long pos : t.getValue()) {
        paths.add(t.getKey().location());
        order.add(new long[] {paths.size() - 1, pos});
      }
    }
    order.sort(Comparator.<long[], String>comparing(o -> paths.get((int) o[0])).thenComparingLong(o -> o[1]));
    GenericAppenderFactory factory = new GenericAppenderFactory(table, table.schema(), spec, null, null, null, null);
    StructLike partition = spec.isPartitioned() ? first.partition() : null;
    PositionDeleteWriter<Record> writer =
        factory.newPosDeleteWriter(output(table, spec, partition, label), FileFormat.PARQUET, partition);
    try (PositionDeleteWriter<Record> w = writer) {
      PositionDelete<Record> delete = PositionDelete.create();
      for (long[] o : order) {
        w.write(delete.set(paths.get((int) o[0]), o[1], null));
      }
    }
    DeleteFile file = writer.toDeleteFile();
    tracked.deleteFiles.put(label, List.of(file));
    return List.of(file);
  }

  /** The live position delete files and DVs of the current snapshot, by "data path\0delete path". */
  private static Map<String, DeleteFile> livePositionDeletes(Table table) throws IOException {
    Map<String, DeleteFile> live = new HashMap<>();
    if (table.currentSnapshot() == null) {
      return live;
    }
    try (CloseableIterable<FileScanTask> tasks = table.newScan().planFiles()) {
      for (FileScanTask task : tasks) {
        for (DeleteFile d : task.deletes()) {
          if (d.content() == FileContent.POSITION_DELETES) {
            live.put(task.file().location() + "\u0000" + d.location() + "\u0000" + d.contentOffset(), d);
          }
        }
      }
    }
    return live;
  }

  private static boolean samePartition(PartitionSpec spec, StructLike a, StructLike b) {
    for (int i = 0; i < spec.fields().size(); i += 1) {
      Object x = a.get(i, Object.class);
      Object y = b.get(i, Object.class);
      if (x == null ? y != null : !x.equals(y)) {
        return false;
      }
    }
    return true;
  }

  private static EncryptedOutputFile output(Table table, PartitionSpec spec, StructLike partition, String label) {
    String name = FileFormat.PARQUET.addExtension(label + "-" + UUID.randomUUID());
    String path = spec.isPartitioned()
        ? table.locationProvider().newDataLocation(spec, partition, name)
        : table.locationProvider().newDataLocation(name);
    return EncryptionUtil.plainAsEncryptedOutput(table.io().newOutputFile(path));
  }

  private static PartitionKey partitionOf(PartitionSpec spec, Schema schema, Record row) {
    PartitionKey key = new PartitionKey(spec, schema);
    key.partition(new InternalRecordWrapper(schema.asStruct()).wrap(row));
    return key;
  }

  // ---------------------------------------------------------------------------------
  // Finding files and snapshots
  // ---------------------------------------------------------------------------------

  /** A data file by name (of this run) or path, or a live one whose file name starts with "name-". */
  private static DataFile dataFile(Table table, Tracked tracked, String ref) throws IOException {
    DataFile known = tracked.dataFiles.get(ref);
    if (known != null) {
      return known;
    }
    DataFile byPath = livePaths(table, tracked).get(ref);
    if (byPath != null) {
      return byPath;
    }
    if (table.currentSnapshot() != null) {
      try (CloseableIterable<FileScanTask> tasks = table.newScan().planFiles()) {
        for (FileScanTask task : tasks) {
          String path = task.file().location();
          if (path.equals(ref) || fileName(path).startsWith(ref + "-")) {
            return task.file();
          }
        }
      }
    }
    throw new IllegalArgumentException("no live data file " + ref);
  }

  /** The live data files of the current snapshot by path, planned once per snapshot. */
  private static Map<String, DataFile> livePaths(Table table, Tracked tracked) throws IOException {
    Snapshot current = table.currentSnapshot();
    if (current == null) {
      return Map.of();
    }
    if (tracked.livePaths == null || tracked.liveSnapshot != current.snapshotId()) {
      Map<String, DataFile> live = new HashMap<>();
      try (CloseableIterable<FileScanTask> tasks = table.newScan().planFiles()) {
        for (FileScanTask task : tasks) {
          live.put(task.file().location(), task.file());
        }
      }
      tracked.livePaths = live;
      tracked.liveSnapshot = current.snapshotId();
    }
    return tracked.livePaths;
  }

  private static List<DeleteFile> deleteFiles(Table table, Tracked tracked, String ref) throws IOException {
    List<DeleteFile> known = tracked.deleteFiles.get(ref);
    if (known != null) {
      return known;
    }
    Map<String, DeleteFile> found = new LinkedHashMap<>();
    if (table.currentSnapshot() != null) {
      try (CloseableIterable<FileScanTask> tasks = table.newScan().planFiles()) {
        for (FileScanTask task : tasks) {
          for (DeleteFile d : task.deletes()) {
            if (d.location().equals(ref) || fileName(d.location()).startsWith(ref + "-")) {
              found.put(d.location() + "\u0000" + d.contentOffset(), d);
            }
          }
        }
      }
    }
    if (found.isEmpty()) {
      throw new IllegalArgumentException("no live delete file " + ref);
    }
    return new ArrayList<>(found.values());
  }

  private static String fileName(String path) {
    return path.substring(path.lastIndexOf('/') + 1);
  }

  /** A snapshot by name, "current", "parent" or id; null for the parent of the first one. */
  private static Snapshot snapshot(Table table, Tracked tracked, JsonNode ref) {
    if (ref == null || ref.isNull() || ref.asText().equals("current")) {
      return table.currentSnapshot();
    }
    if (ref.asText().equals("parent")) {
      Long parent = table.currentSnapshot().parentId();
      return parent == null ? null : table.snapshot(parent);
    }
    Long id = ref.isNumber() ? Long.valueOf(ref.asLong()) : tracked.snapshots.get(ref.asText());
    if (id == null || table.snapshot(id) == null) {
      throw new IllegalArgumentException("no snapshot " + ref);
    }
    return table.snapshot(id);
  }

  // ---------------------------------------------------------------------------------
  // Reading back
  // ---------------------------------------------------------------------------------

  /**
   * The live rows of a snapshot as Iceberg's generic reader sees them (deletes applied),
   * with _file and _pos, projected by field id to the schema of "schema_of".
   */
  private static ObjectNode scan(Table table, Tracked tracked, JsonNode step) throws IOException {
    Snapshot snapshot = snapshot(table, tracked, step.get("snapshot"));
    Snapshot schemaOf = step.has("schema_of") ? snapshot(table, tracked, step.get("schema_of")) : snapshot;
    Schema target = schemaOf == null ? table.schema() : table.schemas().get(schemaOf.schemaId());
    ObjectNode out = NODES.objectNode();
    ArrayNode rows = NODES.arrayNode();
    if (snapshot == null) {
      out.putNull("snapshot_id");
      out.put("schema_id", target.schemaId());
      out.set("rows", rows);
      return out;
    }
    // Iceberg Java looks equality delete columns up in the *current* schema (planning binds
    // them through the spec, the generic reader's delete filter through the table), and
    // fails when one was dropped since. So a column dropped since is put back: read
    // through a copy of the metadata whose current schema has it, and projected here (it
    // is left out of the rows).
    Set<Integer> extra = new LinkedHashSet<>();
    Set<Integer> dropped = new LinkedHashSet<>();
    for (ManifestFile manifest : snapshot.deleteManifests(table.io())) {
      try (ManifestReader<DeleteFile> reader =
          ManifestFiles.readDeleteManifest(manifest, table.io(), table.specs())) {
        for (DeleteFile d : reader) {
          if (d.content() == FileContent.EQUALITY_DELETES) {
            for (int id : d.equalityFieldIds()) {
              if (target.findField(id) == null) {
                extra.add(id);
              }
              if (table.schema().findField(id) == null) {
                dropped.add(id);
              }
            }
          }
        }
      }
    }
    Table reading = table;
    if (!dropped.isEmpty()) {
      TableMetadata current = ops(table).current();
      List<Types.NestedField> union = new ArrayList<>(table.schema().columns());
      for (int id : dropped) {
        union.add(fieldInAnySchema(table, id));
      }
      TableMetadata withDropped = TableMetadata.buildFrom(current)
          .setCurrentSchema(new Schema(union, table.schema().identifierFieldIds()), current.lastColumnId())
          .build();
      reading = new BaseTable(new StaticTableOperations(withDropped, table.io()), table.name());
    }
    List<Types.NestedField> columns = new ArrayList<>(target.columns());
    for (int id : extra) {
      columns.add(fieldInAnySchema(table, id));
    }
    columns.add(MetadataColumns.FILE_PATH);
    columns.add(MetadataColumns.ROW_POSITION);
    Schema projection = new Schema(columns);
    List<ObjectNode> read = new ArrayList<>();
    try (CloseableIterable<Record> records =
        IcebergGenerics.read(reading).useSnapshot(snapshot.snapshotId()).project(projection).build()) {
      for (Record r : records) {
        ObjectNode row = NODES.objectNode();
        for (Types.NestedField f : target.columns()) {
          row.set(f.name(), json(r.getField(f.name())));
        }
        row.put("_file", r.getField(MetadataColumns.FILE_PATH.name()).toString());
        row.put("_pos", (Long) r.getField(MetadataColumns.ROW_POSITION.name()));
        read.add(row);
      }
    }
    read.sort(Comparator.<ObjectNode, String>comparing(o -> o.get("_file").asText())
        .thenComparingLong(o -> o.get("_pos").asLong()));
    read.forEach(rows::add);
    out.put("snapshot_id", snapshot.snapshotId());
    out.put("schema_id", target.schemaId());
    out.set("rows", rows);
    return out;
  }

  private static Types.NestedField fieldInAnySchema(Table table, int id) {
    List<Integer> ids = new ArrayList<>(table.schemas().keySet());
    ids.sort(Comparator.reverseOrder());
    for (int schemaId : ids) {
      Types.NestedField f = table.schemas().get(schemaId).findField(id);
      if (f != null) {
        return Types.NestedField.optional(f.fieldId(), f.name(), f.type());
      }
    }
    throw new IllegalArgumentException("no field " + id + " in any schema");
  }

  /** The live data and delete files of a snapshot, with their sequence numbers. */
  private static ObjectNode files(Table table, Tracked tracked, JsonNode step) throws IOException {
    Snapshot snapshot = snapshot(table, tracked, step.get("snapshot"));
    ObjectNode out = NODES.objectNode();
    out.put("snapshot_id", snapshot.snapshotId());
    out.put("sequence_number", snapshot.sequenceNumber());
    ArrayNode files = out.putArray("files");
    List<ObjectNode> all = new ArrayList<>();
    for (ManifestFile manifest : snapshot.allManifests(table.io())) {
      CloseableIterable<? extends ContentFile<?>> reader = manifest.content() == org.apache.iceberg.ManifestContent.DATA
          ? ManifestFiles.read(manifest, table.io(), table.specs())
          : ManifestFiles.readDeleteManifest(manifest, table.io(), table.specs());
      try (CloseableIterable<? extends ContentFile<?>> r = reader) {
        for (ContentFile<?> f : r) {
          ObjectNode o = NODES.objectNode();
          o.put("path", f.location());
          o.put("content", content(f.content()));
          o.put("format", f.format().name());
          o.put("records", f.recordCount());
          o.put("data_sequence_number", f.dataSequenceNumber());
          o.put("file_sequence_number", f.fileSequenceNumber());
          o.put("manifest_sequence_number", manifest.sequenceNumber());
          o.put("added_in_snapshot", manifest.snapshotId());
          o.put("spec_id", f.specId());
          o.set("partition", partitionJson(table.specs().get(f.specId()), f.partition()));
          if (f.equalityFieldIds() != null) {
            ArrayNode ids = o.putArray("equality_ids");
            f.equalityFieldIds().forEach(ids::add);
          }
          if (f instanceof DeleteFile) {
            DeleteFile d = (DeleteFile) f;
            o.put("referenced_data_file", d.referencedDataFile());
            if (d.contentOffset() != null) {
              o.put("content_offset", d.contentOffset());
              o.put("content_size_in_bytes", d.contentSizeInBytes());
            }
          }
          if (f.firstRowId() != null) {
            o.put("first_row_id", f.firstRowId());
          }
          all.add(o);
        }
      }
    }
    all.sort(Comparator.comparing(o -> o.get("path").asText()));
    all.forEach(files::add);
    return out;
  }

  private static ObjectNode partitionJson(PartitionSpec spec, StructLike partition) {
    ObjectNode o = NODES.objectNode();
    List<PartitionField> fields = spec.fields();
    for (int i = 0; i < fields.size(); i += 1) {
      o.set(fields.get(i).name(), json(partition.get(i, Object.class)));
    }
    return o;
  }

  private static String content(FileContent content) {
    switch (content) {
      case DATA: return "data";
      case POSITION_DELETES: return "position_deletes";
      case EQUALITY_DELETES: return "equality_deletes";
      default: return content.name();
    }
  }

  // ---------------------------------------------------------------------------------
  // Values
  // ---------------------------------------------------------------------------------

  private static Record record(Schema schema, JsonNode row) {
    Record record = partialRecord(schema, row);
    for (Types.NestedField f : schema.columns()) {
      if (f.isRequired() && record.getField(f.name()) == null) {
        throw new IllegalArgumentException("row " + row + " lacks required column " + f.name());
      }
    }
    return record;
  }

  /** A record of the columns the row names (for a partition's source values). */
  private static Record partialRecord(Schema schema, JsonNode row) {
    GenericRecord record = GenericRecord.create(schema);
    Iterator<Map.Entry<String, JsonNode>> it = row.fields();
    while (it.hasNext()) {
      Map.Entry<String, JsonNode> e = it.next();
      Types.NestedField f = schema.findField(e.getKey());
      if (f == null) {
        throw new IllegalArgumentException("no column " + e.getKey() + " in " + schema);
      }
      record.setField(f.name(), value(f.type(), e.getValue()));
    }
    return record;
  }

  private static Object value(Type type, JsonNode v) {
    if (v == null || v.isNull()) {
      return null;
    }
    switch (type.typeId()) {
      case LONG: return v.asLong();
      case INTEGER: return v.asInt();
      case STRING: return v.asText();
      case BOOLEAN: return v.asBoolean();
      case DOUBLE: return v.asDouble();
      case FLOAT: return (float) v.asDouble();
      case DATE: return LocalDate.parse(v.asText());
      case TIMESTAMP:
        return ((Types.TimestampType) type).shouldAdjustToUTC()
            ? OffsetDateTime.parse(v.asText())
            : LocalDateTime.parse(v.asText());
      case UUID: return UUID.fromString(v.asText());
      case DECIMAL: return new BigDecimal(v.asText());
      default: throw new IllegalArgumentException("cannot write " + type);
    }
  }

  private static JsonNode json(Object v) {
    if (v == null) return NODES.nullNode();
    if (v instanceof Long) return NODES.numberNode((Long) v);
    if (v instanceof Integer) return NODES.numberNode((Integer) v);
    if (v instanceof Double) return NODES.numberNode((Double) v);
    if (v instanceof Float) return NODES.numberNode((Float) v);
    if (v instanceof Boolean) return NODES.booleanNode((Boolean) v);
    if (v instanceof BigDecimal) return NODES.textNode(((BigDecimal) v).toPlainString());
    if (v instanceof ByteBuffer) {
      ByteBuffer b = ((ByteBuffer) v).duplicate();
      byte[] bytes = new byte[b.remaining()];
      b.get(bytes);
      return NODES.textNode(Base64.getEncoder().encodeToString(bytes));
    }
    return NODES.textNode(v.toString());
  }

  private static String text(JsonNode node, String field) {
    JsonNode v = node.get(field);
    if (v == null || v.isNull()) {
      throw new IllegalArgumentException("missing \"" + field + "\" in " + node);
    }
    return v.asText();
  }
}
