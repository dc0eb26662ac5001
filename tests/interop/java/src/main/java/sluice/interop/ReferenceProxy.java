package sluice.interop;

import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.netty.shaded.io.netty.channel.nio.NioEventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.socket.nio.NioServerSocketChannel;
import java.net.InetSocketAddress;
import java.util.Date;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.proxy.ProxyStartup;
import org.apache.rocketmq.proxy.config.Configuration;
import org.apache.rocketmq.proxy.config.ConfigurationManager;
import org.apache.rocketmq.proxy.config.ProxyConfig;
import org.apache.rocketmq.proxy.grpc.GrpcServer;
import org.apache.rocketmq.proxy.grpc.GrpcServerBuilder;
import org.apache.rocketmq.proxy.grpc.ProxyAndTlsProtocolNegotiator;
import org.apache.rocketmq.proxy.grpc.v2.GrpcMessagingApplication;
import org.apache.rocketmq.proxy.processor.DefaultMessagingProcessor;
import org.apache.rocketmq.proxy.processor.MessagingProcessor;
import org.apache.rocketmq.proxy.service.cert.TlsCertificateManager;

/**
 * Apache RocketMQ's proxy in cluster mode, gRPC only, for the reference node: what {@code ProxyStartup} starts,
 * except that the gRPC port binds 127.0.0.1 (RocketMQ's binds every interface, with no setting to say otherwise,
 * and test servers bind loopback only), and without its remoting port and metrics, which the tests do not use.
 *
 * <p>Usage: {@code ReferenceProxy <rmq-proxy.json>}; prints "reference proxy boot success" when it serves.
 */
public final class ReferenceProxy {
    private ReferenceProxy() {
    }

    public static void main(String[] args) throws Exception {
        System.setProperty(Configuration.CONFIG_PATH_PROPERTY, args[0]);
        ConfigurationManager.initEnv();
        ConfigurationManager.initConfig();
        ProxyConfig config = ConfigurationManager.getProxyConfig();
        ProxyStartup.initThreadPoolMonitor();
        ThreadPoolExecutor executor = ProxyStartup.createServerExecutor();
        MessagingProcessor processor = DefaultMessagingProcessor.createForClusterMode();
        TlsCertificateManager tls = new TlsCertificateManager();
        GrpcMessagingApplication application = GrpcMessagingApplication.create(processor);
        GrpcServer server = new LoopbackGrpcServerBuilder(executor, config.getGrpcServerPort(), tls)
            .addService(application)
            .configInterceptor()
            .shutdownTime(config.getGrpcShutdownTimeSeconds(), TimeUnit.SECONDS)
            .build();
        processor.start();
        tls.start();
        application.start();
        server.start();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                server.shutdown();
                application.shutdown();
                processor.shutdown();
                tls.shutdown();
                executor.shutdown();
            } catch (Exception e) {
                e.printStackTrace();
            }
        }));
        System.out.printf("%s reference proxy boot success%n", new Date());
    }

    /** RocketMQ's builder, rebuilt on 127.0.0.1 with the same settings. */
    static final class LoopbackGrpcServerBuilder extends GrpcServerBuilder {
        LoopbackGrpcServerBuilder(ThreadPoolExecutor executor, int port, TlsCertificateManager tls) {
            super(executor, port, tls);
            ProxyConfig config = ConfigurationManager.getProxyConfig();
            this.serverBuilder = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", port))
                .maxConcurrentCallsPerConnection(config.getGrpcMaxConcurrentCallsPerConnection())
                .protocolNegotiator(new ProxyAndTlsProtocolNegotiator())
                .bossEventLoopGroup(new NioEventLoopGroup(config.getGrpcBossLoopNum()))
                .workerEventLoopGroup(new NioEventLoopGroup(config.getGrpcWorkerLoopNum()))
                .channelType(NioServerSocketChannel.class)
                .maxInboundMessageSize(config.getGrpcMaxInboundMessageSize())
                .maxConnectionIdle(config.getGrpcClientIdleTimeMills(), TimeUnit.MILLISECONDS);
            this.serverBuilder.executor(executor);
        }
    }
}
