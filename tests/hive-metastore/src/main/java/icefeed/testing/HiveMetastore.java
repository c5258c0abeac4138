package icefeed.testing;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.conf.MetastoreConf;
import org.apache.hadoop.hive.metastore.security.HadoopThriftAuthBridge;
import org.apache.hadoop.hive.metastore.txn.TxnDbUtil;

/**
 * A Hive metastore for tests: {@code HiveMetastore <port> <data-dir>} serves Thrift on
 * 127.0.0.1:port, with its Derby database and default warehouse below data-dir, and
 * prints "metastore ready" once it accepts connections.
 */
public final class HiveMetastore {
    public static void main(String[] args) throws Throwable {
        int port = Integer.parseInt(args[0]);
        String dir = args[1];
        // Derby logs to derby.log in the working directory (the caller's) unless told.
        System.setProperty("derby.stream.error.file", dir + "/derby.log");
        Configuration conf = MetastoreConf.newMetastoreConf();
        conf.set("javax.jdo.option.ConnectionURL", "jdbc:derby:;databaseName=" + dir + "/db;create=true");
        conf.set("javax.jdo.option.ConnectionDriverName", "org.apache.derby.jdbc.EmbeddedDriver");
        // No schema scripts ship on Maven Central: DataNucleus creates the tables, and
        // TxnDbUtil those of the lock manager that commits take locks in.
        conf.set("datanucleus.schema.autoCreateAll", "true");
        conf.set("metastore.schema.verification", "false");
        conf.set("metastore.warehouse.dir", "file://" + dir + "/warehouse");
        conf.set("metastore.thrift.bind.host", "127.0.0.1");
        // The defaults name classes of hive-exec, which the standalone metastore lacks.
        conf.set("metastore.expression.proxy", "org.apache.hadoop.hive.metastore.DefaultPartitionExpressionProxy");
        conf.set("metastore.task.threads.always", "org.apache.hadoop.hive.metastore.events.EventCleanerTask");
        TxnDbUtil.prepDb(conf);
        Thread server = new Thread(() -> {
            try {
                HiveMetaStore.startMetaStore(port, HadoopThriftAuthBridge.getBridge(), conf);
            } catch (Throwable e) {
                e.printStackTrace();
                System.exit(1);
            }
        });
        server.start();
        while (true) {
            try (java.net.Socket probe = new java.net.Socket("127.0.0.1", port)) {
                break;
            } catch (java.io.IOException notYet) {
                Thread.sleep(100);
            }
        }
        System.out.println("metastore ready");
        System.out.flush();
        server.join();
    }
}
