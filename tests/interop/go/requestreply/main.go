// Request-reply with the Go remoting client (rocketmq-client-go v2.1.2), as tests/interop/test_go_request_reply.py
// runs it against a Sluice broker: "-role requester" sends -count requests with producer.Request and prints each
// reply; "-role responder" answers -count requests with consumer.CreateReplyMessage and SendSync (body
// upper-cased), then ends. A reply whose send failed is tried again with the request's redelivery; a request
// delivered again once answered is not answered twice. One JSON object per line on stdout; the program ends by
// itself after -timeout.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

var out = json.NewEncoder(os.Stdout)
var outMu sync.Mutex

func emit(v map[string]interface{}) {
	outMu.Lock()
	defer outMu.Unlock()
	_ = out.Encode(v)
}

func main() {
	role := flag.String("role", "", "requester or responder")
	namesrv := flag.String("namesrv", "127.0.0.1:9876", "name server")
	topic := flag.String("topic", "", "request topic")
	group := flag.String("group", "", "producer / consumer group")
	count := flag.Int("count", 1, "requests to send or answer")
	prefix := flag.String("prefix", "ping", "request bodies: <prefix>-<i>")
	timeout := flag.Duration("timeout", 60*time.Second, "the longest the program runs")
	flag.Parse()
	rlog.SetLogLevel("error")
	go func() {
		time.Sleep(*timeout)
		emit(map[string]interface{}{"event": "end", "reason": "timeout"})
		os.Exit(3)
	}()
	var err error
	switch *role {
	case "requester":
		err = request(*namesrv, *topic, *group, *count, *prefix)
	case "responder":
		err = respond(*namesrv, *topic, *group, *count)
	default:
		err = fmt.Errorf("-role must be requester or responder, not %q", *role)
	}
	if err != nil {
		emit(map[string]interface{}{"event": "end", "reason": "error", "error": err.Error()})
		os.Exit(1)
	}
	emit(map[string]interface{}{"event": "end", "reason": "complete"})
}

func request(namesrv, topic, group string, count int, prefix string) error {
	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{namesrv})),
		producer.WithGroupName(group), producer.WithRetry(2))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer func() { _ = p.Shutdown() }()
	for i := 0; i < count; i++ {
		body := fmt.Sprintf("%s-%d", prefix, i)
		reply, err := p.Request(context.Background(), 20*time.Second, primitive.NewMessage(topic, []byte(body)))
		if err != nil {
			emit(map[string]interface{}{"event": "failed", "body": body, "error": err.Error()})
			return err
		}
		emit(map[string]interface{}{"event": "reply", "request": body, "body": string(reply.Body),
			"topic": reply.Topic, "properties": reply.GetProperties()})
	}
	return nil
}

func respond(namesrv, topic, group string, count int) error {
	replier, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{namesrv})),
		producer.WithGroupName(group+"-replier"))
	if err != nil {
		return err
	}
	if err := replier.Start(); err != nil {
		return err
	}
	defer func() { _ = replier.Shutdown() }()
	done := make(chan struct{})
	var mu sync.Mutex
	answered := map[string]bool{} // request bodies replied to (a request may be delivered again: at least once)
	c, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{namesrv})),
		consumer.WithGroupName(group), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		return err
	}
	err = c.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context,
		msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			mu.Lock()
			again := answered[string(m.Body)]
			mu.Unlock()
			if again {
				emit(map[string]interface{}{"event": "duplicate", "body": string(m.Body)})
				continue
			}
			// As rocketmq-client-go's own request-reply example does: a Go requester registers its producer with
			// the broker (the heartbeat the reply is pushed back over) only around its first request, and a
			// reply sent before that finds no channel, from RocketMQ's broker as from Sluice's.
			time.Sleep(time.Second)
			reply, err := consumer.CreateReplyMessage(m, nil)
			if err != nil {
				emit(map[string]interface{}{"event": "failed", "body": string(m.Body), "error": err.Error()})
				return consumer.ConsumeRetryLater, nil
			}
			// v2.1.2's CreateReplyMessage reads its body argument as encoded properties and never sets the body
			// (the reply arrives empty from any broker): the body is set here.
			reply.Body = bytes.ToUpper(m.Body)
			// The request as seen, recorded before the send: a send that times out late may still have reached
			// the requester, which then ends, and the redelivered request's reply then finds no requester.
			emit(map[string]interface{}{"event": "replying", "body": string(m.Body), "reply_topic": reply.Topic,
				"properties": m.GetProperties()})
			r, err := replier.SendSync(context.Background(), reply)
			if err != nil {
				emit(map[string]interface{}{"event": "failed", "body": string(m.Body), "error": err.Error()})
				return consumer.ConsumeRetryLater, nil
			}
			emit(map[string]interface{}{"event": "replied", "body": string(m.Body), "reply_topic": reply.Topic,
				"status": r.Status, "properties": m.GetProperties()})
			mu.Lock()
			answered[string(m.Body)] = true
			if len(answered) == count {
				close(done)
			}
			mu.Unlock()
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}
	emit(map[string]interface{}{"event": "started"})
	<-done
	return c.Shutdown()
}
