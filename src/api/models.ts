/** Wire shapes of GET /v1/models (the specification's model object and list). */
export interface ModelObject {
  id: string;
  object: 'model';
  created: number;
  owned_by: string;
  status: 'running';
  /** Extensions: what the model does and whether it is in memory now. */
  kind: string;
  loaded: boolean;
}

export interface ModelList {
  object: 'list';
  data: ModelObject[];
}
