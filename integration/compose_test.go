package integration

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       any               `yaml:"build"`
		Command     []string          `yaml:"command"`
		Entrypoint  []string          `yaml:"entrypoint"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

// TestComposeWiring checks docker-compose.yml is the documented topology: six cluster-enabled Redis
// nodes, a one-shot cluster-create with one replica per master, and three gateways with distinct node
// ids whose advertised ports are the ports published on the host, all on the Redis Cluster, each with a
// /readyz healthcheck, started only after the cluster exists.
func TestComposeWiring(t *testing.T) {
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(raw, &cf); err != nil {
		t.Fatalf("parse compose: %v", err)
	}
	var redisNodes []string
	for name, s := range cf.Services {
		if strings.HasPrefix(name, "redis-") && name != "redis-cluster-init" {
			redisNodes = append(redisNodes, name)
			if !strings.Contains(strings.Join(s.Command, " "), "--cluster-enabled yes") {
				t.Errorf("%s: not cluster-enabled: %v", name, s.Command)
			}
		}
	}
	if len(redisNodes) != 6 {
		t.Fatalf("want 6 redis nodes, got %v", redisNodes)
	}
	initSvc, ok := cf.Services["redis-cluster-init"]
	if !ok {
		t.Fatal("no redis-cluster-init service")
	}
	create := strings.Join(initSvc.Entrypoint, " ")
	if !strings.Contains(create, "--cluster create") || !strings.Contains(create, "--cluster-replicas 1") {
		t.Errorf("cluster-init does not create a cluster with one replica per master: %s", create)
	}
	if len(initSvc.DependsOn) != 6 {
		t.Errorf("cluster-init waits for %d nodes, want 6", len(initSvc.DependsOn))
	}
	ids := map[string]bool{}
	for i := 0; i < 3; i++ {
		name := "kgate-" + strconv.Itoa(i)
		s, ok := cf.Services[name]
		if !ok {
			t.Fatalf("no %s service", name)
		}
		env := s.Environment
		if ids[env["KGATE_NODE_ID"]] {
			t.Errorf("%s: duplicate node id %q", name, env["KGATE_NODE_ID"])
		}
		ids[env["KGATE_NODE_ID"]] = true
		if env["KGATE_REDIS_CLUSTER"] != "true" || len(strings.Split(env["KGATE_REDIS_ADDRS"], ",")) < 3 {
			t.Errorf("%s: not pointed at the Redis Cluster: %v", name, env)
		}
		_, advPort, _ := strings.Cut(env["KGATE_KAFKA_ADVERTISED"], ":")
		_, listenPort, _ := strings.Cut(env["KGATE_KAFKA_LISTEN"], ":")
		if want := advPort + ":" + listenPort; len(s.Ports) == 0 || s.Ports[0] != want {
			t.Errorf("%s: publishes %v, want %s so the advertised address reaches the listener", name, s.Ports, want)
		}
		if !strings.Contains(strings.Join(s.Healthcheck.Test, " "), "/readyz") {
			t.Errorf("%s: healthcheck %v does not probe /readyz", name, s.Healthcheck.Test)
		}
		if s.DependsOn["redis-cluster-init"].Condition != "service_completed_successfully" {
			t.Errorf("%s: does not wait for the cluster to be created", name)
		}
		if env["KGATE_ADMIN_ADVERTISED"] != name+":8080" {
			t.Errorf("%s: admin advertised %q, want %s:8080 (peers forward admin calls there)", name, env["KGATE_ADMIN_ADVERTISED"], name)
		}
	}
}
