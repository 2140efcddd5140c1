"""What an answer says.

    sources   response sources: ``RandomResponses`` (the predefined sentences, the length
              histogram), ``EchoResponses``, ``RecordedResponses`` (a SQLite dataset)
    logprobs  simulated log-probabilities, top logprobs and their wire shapes
"""
