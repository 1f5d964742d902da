package gateway

// publishAppend tells other gateways that a partition grew, so their long-polling fetches wake up.
// A single gateway needs nothing: local appends notify directly.
func (g *Gateway) publishAppend(topic string, partition int32) {}
