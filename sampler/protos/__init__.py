"""The project's own protobuf classes, generated from protos/sampler/protos/*.proto.

Wire- and text-format compatible with TF-GNN's GraphSchema and SamplingSpec and TensorFlow's
Example, so the sampler reads and writes the same files without importing TensorFlow.

  graph_schema_pb2   beam_graph.GraphSchema
  tensor_pb2         beam_graph.DataType, beam_graph.TensorShapeProto (TensorFlow's numbers)
  sampling_spec_pb2  beam_graph.sampler.SamplingSpec
  example_pb2        beam_graph.example.Example

Do not edit the *_pb2.py files: edit the .proto and run `python scripts/gen_protos.py`.
"""
