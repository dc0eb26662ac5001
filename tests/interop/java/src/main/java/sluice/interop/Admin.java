package sluice.interop;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.message.MessageRequestMode;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.admin.ConsumeStats;
import org.apache.rocketmq.remoting.protocol.admin.OffsetWrapper;
import org.apache.rocketmq.remoting.protocol.admin.TopicOffset;
import org.apache.rocketmq.remoting.protocol.admin.TopicStatsTable;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.route.QueueData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * {@code DefaultMQAdminExt} as a little server: one JSON request per line on stdin ({@code {"op": "topicRoute",
 * "topic": "t"}}), one JSON answer per line on stdout ({@code {"ok": true, "result": ...}} or {@code {"ok": false,
 * "error": "MQBrokerException", "code": 17, "message": "..."}}). Ends at end of input.
 */
final class Admin {
    private Admin() {
    }

    static int run(Args a) throws Exception {
        PrintStream answers = System.out;
        System.setOut(System.err);  // the client's logging prints its set-up notes on stdout
        DefaultMQAdminExt admin = a.rpcHook() == null ? new DefaultMQAdminExt(a.getInt("timeout-ms", 10_000))
            : new DefaultMQAdminExt(a.rpcHook(), a.getInt("timeout-ms", 10_000));
        admin.setNamesrvAddr(a.get("namesrv"));
        admin.setInstanceName("sluice-interop-admin-" + ProcessHandle.current().pid());
        admin.start();
        Journal out = new Journal(answers);
        out.event("started");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JSONObject req = JSON.parseObject(line);
            JSONObject answer = new JSONObject();
            try {
                answer.put("result", call(admin, req));
                answer.put("ok", true);
            } catch (MQBrokerException e) {
                failed(answer, e, e.getResponseCode(), e.getErrorMessage());
            } catch (MQClientException e) {
                failed(answer, e, e.getResponseCode(), e.getErrorMessage());
            } catch (Exception e) {
                failed(answer, e, -1, String.valueOf(e.getMessage()));
            }
            out.write(answer);
        }
        admin.shutdown();
        return 0;
    }

    private static void failed(JSONObject answer, Exception e, int code, String message) {
        answer.put("ok", false);
        answer.put("error", e.getClass().getSimpleName());
        answer.put("code", code);
        answer.put("message", message);
        answer.put("detail", String.valueOf(e));
    }

    private static Object call(DefaultMQAdminExt admin, JSONObject r) throws Exception {
        switch (r.getString("op")) {
            case "clusterInfo":
                return clusterInfo(admin.examineBrokerClusterInfo());
            case "topicRoute":
                return route(admin.examineTopicRouteInfo(r.getString("topic")));
            case "consumeStats":
                return consumeStats(r.containsKey("topic")
                    ? admin.examineConsumeStats(r.getString("group"), r.getString("topic"))
                    : admin.examineConsumeStats(r.getString("group")));
            case "topicStats":
                return topicStats(admin.examineTopicStats(r.getString("topic")));
            case "queryMessage": {
                QueryResult q = admin.queryMessage(r.getString("topic"), r.getString("key"),
                    r.getIntValue("max", 32), r.getLongValue("begin", 0), r.getLongValue("end", Long.MAX_VALUE));
                JSONArray msgs = new JSONArray();
                for (MessageExt m : q.getMessageList()) {
                    msgs.add(Journal.message(m));
                }
                return msgs;
            }
            case "viewMessage":
                return Journal.message(admin.viewMessage(r.getString("topic"), r.getString("msgId")));
            case "createTopic": {
                TopicConfig tc = new TopicConfig(r.getString("topic"), r.getIntValue("read", 4),
                    r.getIntValue("write", 4), r.getIntValue("perm", 6));
                tc.setOrder(r.getBooleanValue("order", false));
                admin.createAndUpdateTopicConfig(r.getString("addr"), tc);
                return null;
            }
            case "deleteTopic":
                admin.deleteTopic(r.getString("topic"), r.getString("cluster"));
                return null;
            case "resetOffsetByTimestamp": {
                Map<MessageQueue, Long> reset = admin.resetOffsetByTimestamp(r.getString("topic"),
                    r.getString("group"), r.getLongValue("timestamp"), r.getBooleanValue("force", true));
                JSONArray rows = new JSONArray();
                for (Map.Entry<MessageQueue, Long> e : new TreeMap<>(reset).entrySet()) {
                    JSONObject row = Journal.queue(e.getKey());
                    row.put("offset", e.getValue());
                    rows.add(row);
                }
                return rows;
            }
            case "maxOffset":
                return admin.maxOffset(new MessageQueue(r.getString("topic"), r.getString("broker"),
                    r.getIntValue("queueId")));
            case "minOffset":
                return admin.minOffset(new MessageQueue(r.getString("topic"), r.getString("broker"),
                    r.getIntValue("queueId")));
            case "searchOffset":
                return admin.searchOffset(new MessageQueue(r.getString("topic"), r.getString("broker"),
                    r.getIntValue("queueId")), r.getLongValue("timestamp"));
            case "setMessageRequestMode":  // to every broker of the topic's route, as RocketMQ's PopConsumer example
                for (BrokerData b : admin.examineTopicRouteInfo(r.getString("topic")).getBrokerDatas()) {
                    for (String addr : b.getBrokerAddrs().values()) {
                        admin.setMessageRequestMode(addr, r.getString("topic"), r.getString("group"),
                            MessageRequestMode.valueOf(r.getString("mode")), r.getIntValue("popShareQueueNum"),
                            10_000);
                    }
                }
                return null;
            case "raw":
                return raw(admin, r);
            // ACL 2.0 (mqadmin createUser ... listAcl)
            case "createUser":
                admin.createUser(r.getString("addr"), r.getString("username"), r.getString("password"),
                    r.getString("userType"));
                return null;
            case "updateUser":
                admin.updateUser(r.getString("addr"), r.getString("username"), r.getString("password"),
                    r.getString("userType"), r.getString("userStatus"));
                return null;
            case "deleteUser":
                admin.deleteUser(r.getString("addr"), r.getString("username"));
                return null;
            case "getUser":
                return JSON.toJSON(admin.getUser(r.getString("addr"), r.getString("username")));
            case "listUser":
                return JSON.toJSON(admin.listUser(r.getString("addr"), r.getString("filter")));
            case "createAcl":
                admin.createAcl(r.getString("addr"), r.getString("subject"), strings(r, "resources"),
                    strings(r, "actions"), strings(r, "sourceIps"), r.getString("decision"));
                return null;
            case "updateAcl":
                admin.updateAcl(r.getString("addr"), r.getString("subject"), strings(r, "resources"),
                    strings(r, "actions"), strings(r, "sourceIps"), r.getString("decision"));
                return null;
            case "deleteAcl":
                admin.deleteAcl(r.getString("addr"), r.getString("subject"), r.getString("resource"));
                return null;
            case "getAcl":
                return JSON.toJSON(admin.getAcl(r.getString("addr"), r.getString("subject")));
            case "listAcl":
                return JSON.toJSON(admin.listAcl(r.getString("addr"), r.getString("subjectFilter"),
                    r.getString("resourceFilter")));
            default:
                throw new IllegalArgumentException("unknown op " + r.getString("op"));
        }
    }

    private static List<String> strings(JSONObject r, String key) {
        JSONArray a = r.getJSONArray(key);
        return a == null ? null : a.toJavaList(String.class);
    }

    /** Any request, sent as the Java client sends it: {"addr", "code", "ext": {...}, "body": text}. */
    private static JSONObject raw(DefaultMQAdminExt admin, JSONObject r) throws Exception {
        RemotingCommand request = RemotingCommand.createRequestCommand(r.getIntValue("code"), null);
        JSONObject ext = r.getJSONObject("ext");
        if (ext != null) {
            for (String k : ext.keySet()) {
                request.addExtField(k, ext.getString(k));
            }
        }
        if (r.containsKey("body")) {
            request.setBody(r.getString("body").getBytes(StandardCharsets.UTF_8));
        }
        RemotingCommand response = admin.getDefaultMQAdminExtImpl().getMqClientInstance().getMQClientAPIImpl()
            .getRemotingClient().invokeSync(r.getString("addr"), request, r.getLongValue("timeoutMs", 10_000));
        JSONObject o = new JSONObject();
        o.put("code", response.getCode());
        o.put("remark", response.getRemark());
        o.put("ext", response.getExtFields() == null ? Map.of() : new TreeMap<>(response.getExtFields()));
        o.put("body", response.getBody() == null ? null : new String(response.getBody(), StandardCharsets.UTF_8));
        return o;
    }

    private static JSONObject clusterInfo(ClusterInfo info) {
        JSONObject o = new JSONObject();
        JSONObject brokers = new JSONObject();
        for (Map.Entry<String, BrokerData> e : info.getBrokerAddrTable().entrySet()) {
            brokers.put(e.getKey(), brokerData(e.getValue()));
        }
        o.put("brokers", brokers);
        JSONObject clusters = new JSONObject();
        for (Map.Entry<String, java.util.Set<String>> e : info.getClusterAddrTable().entrySet()) {
            List<String> names = new ArrayList<>(e.getValue());
            names.sort(null);
            clusters.put(e.getKey(), names);
        }
        o.put("clusters", clusters);
        return o;
    }

    private static JSONObject brokerData(BrokerData b) {
        JSONObject o = new JSONObject();
        o.put("cluster", b.getCluster());
        o.put("broker_name", b.getBrokerName());
        TreeMap<String, String> addrs = new TreeMap<>();
        b.getBrokerAddrs().forEach((id, addr) -> addrs.put(String.valueOf(id), addr));
        o.put("addrs", addrs);
        return o;
    }

    private static JSONObject route(TopicRouteData route) {
        JSONObject o = new JSONObject();
        JSONArray queues = new JSONArray();
        for (QueueData q : route.getQueueDatas()) {
            JSONObject qo = new JSONObject();
            qo.put("broker_name", q.getBrokerName());
            qo.put("read", q.getReadQueueNums());
            qo.put("write", q.getWriteQueueNums());
            qo.put("perm", q.getPerm());
            qo.put("topic_sys_flag", q.getTopicSysFlag());
            queues.add(qo);
        }
        o.put("queues", queues);
        JSONArray brokers = new JSONArray();
        for (BrokerData b : route.getBrokerDatas()) {
            brokers.add(brokerData(b));
        }
        o.put("brokers", brokers);
        o.put("order_topic_conf", route.getOrderTopicConf());
        return o;
    }

    private static JSONObject consumeStats(ConsumeStats stats) {
        JSONObject o = new JSONObject();
        JSONArray rows = new JSONArray();
        for (Map.Entry<MessageQueue, OffsetWrapper> e : new TreeMap<>(stats.getOffsetTable()).entrySet()) {
            JSONObject row = Journal.queue(e.getKey());
            row.put("broker_offset", e.getValue().getBrokerOffset());
            row.put("consumer_offset", e.getValue().getConsumerOffset());
            row.put("pull_offset", e.getValue().getPullOffset());
            row.put("last_timestamp", e.getValue().getLastTimestamp());
            rows.add(row);
        }
        o.put("offsets", rows);
        o.put("consume_tps", stats.getConsumeTps());
        o.put("total_diff", stats.computeTotalDiff());
        return o;
    }

    private static JSONObject topicStats(TopicStatsTable stats) {
        JSONObject o = new JSONObject();
        JSONArray rows = new JSONArray();
        for (Map.Entry<MessageQueue, TopicOffset> e : new TreeMap<>(stats.getOffsetTable()).entrySet()) {
            JSONObject row = Journal.queue(e.getKey());
            row.put("min_offset", e.getValue().getMinOffset());
            row.put("max_offset", e.getValue().getMaxOffset());
            row.put("last_update_timestamp", e.getValue().getLastUpdateTimestamp());
            rows.add(row);
        }
        o.put("offsets", rows);
        return o;
    }
}
