"""NVIDIA Dynamo serving one model across a group of hosts: `facts` (1.6.1 and its vLLM pin,
flags, reserved names, with sources), `engine` (`DynamoEngine`: the worker on vLLM's flags, the
member's part in its group), `units` (the frontend member's etcd and frontend units) and
`metrics`. May import as `specdec.engines` says."""
