"""WHERE bytes go: the output seam (this package imports nothing: format/ uses its naming).

A run's records reach their destination through one :class:`Output`, chosen once from
``--output_dir`` (and, for google-research/bert's ``--output_file`` list, the named files) by
:func:`bert_data.output.outputs.open_output`. The coordinator (:mod:`bert_data.runners.job`) drives every output the same
way, so resume, atomic publication and the manifest-last commit are written once:

    prepare(settings, planned_groups)  fresh work dir, or the interrupted run's (checked to be this
                                       run: :mod:`bert_data.output.journal`); counters so far, or
                                       None when the output is already complete
    todo(planned)                      the planned groups still to make
    accept(result, counters)           a finished group, in group order: appended or indexed, journaled
    publish()                          every shard in place under its final name; records per shard
    commit(manifest)                   the manifest (the commit point), then the work directory removed
    discard()                          nothing usable: everything of the run removed
    failure(exc)                       an error of the destination (``catches``) as one line

Outputs in :data:`OUTPUTS`: ``local_dir`` (:mod:`.local_dir`), ``object_store`` (:mod:`.object_store`),
``named_files`` (:mod:`.named_files`, a local run whose commit moves its shards onto the named
files). File names: :mod:`.naming`; a group's fragment: :mod:`.fragment`. What the bytes of a
record and of a shard are is :mod:`bert_data.format`'s business (encoders, containers): a new
output format is a container there, which every output assembles (or refuses to, when its
runs cannot be concatenated).
"""
