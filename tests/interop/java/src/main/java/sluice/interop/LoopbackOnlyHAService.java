package sluice.interop;

import org.apache.rocketmq.store.ha.DefaultHAService;

/**
 * The reference broker's HA service, loaded through RocketMQ's {@code META-INF/service} hook: RocketMQ's own,
 * except that it does not listen for slaves. Its HA port always binds every interface (there is no bind-address
 * setting), and test servers bind 127.0.0.1 only; the reference node has no slaves.
 */
public class LoopbackOnlyHAService extends DefaultHAService {
    @Override
    public void start() throws Exception {
        this.groupTransferService.start();
        this.haConnectionStateNotificationService.start();
        if (this.haClient != null) {
            this.haClient.start();
        }
    }
}
