package icefeed.testing;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.stream.Stream;

import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.transport.Netty4Plugin;

/**
 * A single-node OpenSearch cluster for tests: {@code OpenSearchNode HTTP_PORT [HOME_DIR]}.
 *
 * <p>HOME_DIR (default: a fresh temporary directory, deleted on exit) holds the node's
 * data; it has empty modules/ and plugins/ folders because the only plugin, Netty4 for
 * HTTP and transport, comes from the classpath. Runs until SIGTERM/SIGINT.
 */
public final class OpenSearchNode {

    /** Node's public constructor loads no classpath plugins; the protected one does. */
    static final class WithNetty extends Node {
        WithNetty(Environment environment) {
            super(environment, List.of(Netty4Plugin.class), true);
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1 || args.length > 2) {
            System.err.println("usage: OpenSearchNode HTTP_PORT [HOME_DIR]");
            System.exit(2);
        }
        int httpPort = Integer.parseInt(args[0]);
        boolean temporary = args.length < 2;
        Path home = temporary ? Files.createTempDirectory("icefeed-opensearch-") : Path.of(args[1]);
        Files.createDirectories(home.resolve("modules"));
        Files.createDirectories(home.resolve("plugins"));

        Settings settings = Settings.builder()
                .put("cluster.name", "icefeed-test")
                .put("node.name", "icefeed-test")
                .put("discovery.type", "single-node")
                .put("network.host", "127.0.0.1")
                .put("http.port", httpPort)
                .put("path.home", home.toString())
                .put("path.data", home.resolve("data").toString())
                .put("path.logs", home.resolve("logs").toString())
                // Test machines often have little free disk; never turn indices read-only.
                .put("cluster.routing.allocation.disk.threshold_enabled", false)
                .build();
        Environment environment =
                InternalSettingsPreparer.prepareEnvironment(settings, Map.of(), null, () -> "icefeed-test");

        Node node = new WithNetty(environment);
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
            } catch (IOException e) {
                System.err.println("closing the node: " + e);
            }
            if (temporary) {
                deleteTree(home);
            }
            stopped.countDown();
        }, "icefeed-opensearch-shutdown"));
        node.start();
        System.err.println("OpenSearch " + org.opensearch.Version.CURRENT + " listening on http://127.0.0.1:" + httpPort);
        stopped.await();
    }

    private static void deleteTree(Path root) {
        try (Stream<Path> paths = Files.walk(root)) {
            paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            System.err.println("removing " + root + ": " + e);
        }
    }
}
